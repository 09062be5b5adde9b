#!/bin/bash
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gres=gpu:4

MASTER_ADDR=$(scontrol show hostnames $SLURM_JOB_NODELIST | head -n 1)
accelerate launch --num_machines 2 --num_processes 8 --machine_rank 0 \
  --main_process_ip $MASTER_ADDR --main_process_port 29500 \
  --use_deepspeed finetune.py
