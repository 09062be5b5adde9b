#!/bin/bash
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gres=gpu:2

export MASTER_ADDR=$(scontrol show hostnames $SLURM_JOB_NODELIST | head -n 1)
export MASTER_PORT=$((20000 + SLURM_JOB_ID % 10000))
LAUNCHER="accelerate launch \
    --multi_gpu \
    --mixed_precision=fp16 \
    --num_machines 2 \
    --num_processes 4 \
    --main_process_port $MASTER_PORT \
    --machine_rank $SLURM_PROCID \
    --main_process_ip=$MASTER_ADDR \
"
CMD="train_cls.py --epochs 10"
srun --kill-on-bad-exit=1 bash -c "$LAUNCHER $CMD"
