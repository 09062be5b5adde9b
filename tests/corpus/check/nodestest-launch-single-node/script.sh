#!/bin/bash

#SBATCH --job-name=admin_test
#SBATCH --nodes=1
#SBATCH --gres=gpu:8
#SBATCH --cpus-per-gpu=4
#SBATCH -o %N_%x_%j.out
#SBTACH -e %N_%x_%j.err

python -m torch.distributed.launch \
        --nproc_per_node=8 \
        --use_env main.py
