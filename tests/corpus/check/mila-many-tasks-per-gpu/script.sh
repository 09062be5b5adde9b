#!/bin/bash
#SBATCH --gpus=1
#SBATCH --ntasks=2
#SBATCH --mem=16G

mkdir -p $SLURM_TMPDIR/data
cp /network/datasets/cifar10.tar.gz $SLURM_TMPDIR/data/
unset CUDA_VISIBLE_DEVICES
srun --ntasks=1 python main.py --learning-rate 5e-4 &
srun --ntasks=1 python main.py --learning-rate 2.5e-4 &
wait
