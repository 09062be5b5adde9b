#!/bin/bash
#SBATCH --nodes=1
#SBATCH --job-name=test
#SBATCH --ntasks-per-node=2
#SBATCH --gres=gpu:2
#SBATCH --time=120:00:00

ms_addr=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
export MASTER_ADDR=$ms_addr
export MASTER_PORT=12321
export WORLD_SIZE=$(($SLURM_NNODES * $SLURM_NTASKS_PER_NODE))
python ../mace/scripts/run_train.py \
       --distributed \
       --name model --train_file train.xyz
