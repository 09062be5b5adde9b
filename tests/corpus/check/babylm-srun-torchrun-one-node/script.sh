#!/bin/bash
#SBATCH --nodes=1
#SBATCH --gres=gpu:1
head_node_ip=$(hostname --ip-address)
port_number=$((20000 + RANDOM % 20000))
srun torchrun \
--nnodes 1 \
--nproc_per_node 1 \
--rdzv_id $RANDOM \
--rdzv_backend c10d \
--rdzv_endpoint $head_node_ip:$port_number \
train.py $@
