#!/bin/bash
#SBATCH --job-name=ft-multinode
#SBATCH --ntasks=4
#SBATCH --nodes=4
#SBATCH --gpus-per-task=8
#SBATCH --cpus-per-task=96

nodes=( $( scontrol show hostnames $SLURM_JOB_NODELIST ) )
head_node=${nodes[0]}
head_node_ip=$(srun --nodes=1 --ntasks=1 -w "$head_node" hostname --ip-address)
export NCCL_DEBUG=WARN

torchrun --nnodes 4 --nproc_per_node 8 --rdzv_id $RANDOM --rdzv_backend c10d \
  --rdzv_endpoint $head_node_ip:29500 ./finetuning.py --enable_fsdp
