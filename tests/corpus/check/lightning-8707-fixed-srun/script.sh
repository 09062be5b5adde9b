#!/bin/bash
#SBATCH --time=00:10:00
#SBATCH --ntasks-per-node=4
#SBATCH --cpus-per-task=4
#SBATCH --gpus=8
#SBATCH --nodes=2

export OMP_NUM_THREADS=$SLURM_CPUS_ON_NODE
source ~/venv/bin/activate
cd ~/test/
srun python test.py
