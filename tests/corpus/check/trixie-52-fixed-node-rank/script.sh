#!/bin/bash
#SBATCH --partition=TrixieMain
#SBATCH --time=12:00:00
#SBATCH --gres=gpu:4
#SBATCH --nodes=2

source activate multiplenodes
srun python -m torch.distributed.launch --nproc_per_node=4 --nnodes=2 --node_rank=0 main.py
srun python -m torch.distributed.launch --nproc_per_node=4 --nnodes=2 --node_rank=1 main.py
