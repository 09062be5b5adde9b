#!/bin/bash
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gres=gpu:4

export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
srun bash -c "accelerate launch --config_file ds_zero3.yaml \
  --num_machines $SLURM_NNODES --num_processes 8 \
  --machine_rank $SLURM_NODEID --main_process_ip $MASTER_ADDR \
  --main_process_port 29555 finetune.py"
