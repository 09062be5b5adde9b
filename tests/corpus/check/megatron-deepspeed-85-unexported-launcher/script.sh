#!/bin/bash
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1

MASTER_ADDR=$(scontrol show hostnames | head -n1)
MASTER_PORT=12345
LAUNCHER="python -u -m torch.distributed.launch \
    --nproc_per_node 40 \
    --nnodes $SLURM_JOB_NUM_NODES \
    --master_addr $MASTER_ADDR \
    --master_port $MASTER_PORT \
    "
srun bash -c '$LAUNCHER --node_rank $SLURM_PROCID distprog.py'
