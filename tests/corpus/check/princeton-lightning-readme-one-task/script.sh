#!/bin/bash
#SBATCH --job-name=pl-multi
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=8
#SBATCH --gres=gpu:2

module purge
module load anaconda3/2021.11
conda activate /scratch/envs/bolts
export PL_TORCH_DISTRIBUTED_BACKEND=gloo
srun python myscript.py
