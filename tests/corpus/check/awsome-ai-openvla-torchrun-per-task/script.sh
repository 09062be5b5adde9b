#!/bin/bash
#SBATCH --job-name=vla-finetune
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=8
#SBATCH --gres=gpu:8
#SBATCH --exclusive

export VLA_HOME=${VLA_HOME:-/fsx/$USER/vla}
srun --container-image=$VLA_HOME/vla.sqsh \
     --container-mounts=$VLA_HOME:$VLA_HOME \
     torchrun --standalone --nnodes=1 --nproc_per_node=8 \
     finetune.py --batch_size 16
