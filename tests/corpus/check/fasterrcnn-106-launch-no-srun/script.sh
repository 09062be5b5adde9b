#!/bin/bash
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gres=gpu:4

export MASTER_PORT=$(expr 10000 + $(echo -n $SLURM_JOBID | tail -c 4))
export WORLD_SIZE=$(($SLURM_NNODES * $SLURM_NTASKS_PER_NODE))
master_addr=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
export MASTER_ADDR=$(getent hosts $master_addr | awk '{ print $1 }')
python -m torch.distributed.launch --nproc_per_node=4 --nnodes=2 --use_env \
  pipeline/train.py --data data.yaml --epochs 1 --model fasterrcnn_resnet50_fpn
