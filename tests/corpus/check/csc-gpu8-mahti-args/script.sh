#!/bin/bash
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=4
#SBATCH --cpus-per-task=10
#SBATCH --gres=gpu:a100:4

export NCCL_DEBUG=INFO
set -x
srun python3 $*
