#!/bin/bash -l
#SBATCH -N 2
#SBATCH -A m1234_g
#SBATCH -q regular
#SBATCH -C gpu
#SBATCH --exclusive
#SBATCH --gpu-bind=none
#SBATCH --ntasks-per-gpu=1
#SBATCH --gpus-per-node=4
#SBATCH -o WarpX.o%j

EXE=./warpx
export SRUN_CPUS_PER_TASK=32
srun --cpu-bind=cores bash -c "
    export CUDA_VISIBLE_DEVICES=\$((3-SLURM_LOCALID));
    ${EXE} inputs" > output.txt
