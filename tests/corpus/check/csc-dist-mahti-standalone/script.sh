#!/bin/bash
#SBATCH --nodes=1
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=40
#SBATCH --gres=gpu:a100:4

srun python3 -m torch.distributed.run --standalone --nnodes=1 --nproc_per_node=4 $*
