#!/bin/bash
#SBATCH --partition=gputest
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=40
#SBATCH --gres=gpu:v100:4

module load pytorch
srun python3 mnist_lightning_ddp.py --gpus=4 --epochs=100
