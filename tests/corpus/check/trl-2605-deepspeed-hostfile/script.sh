#!/bin/bash
#SBATCH --job-name=sft
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=24
#SBATCH --gres=gpu:8

export NCCL_SOCKET_IFNAME=enp71s0
MASTER_ADDR=10.0.0.1
MASTER_PORT=6010
srun --jobid $SLURM_JOBID bash -c "source activate trl; deepspeed --hostfile=config/hostfile --master_addr=$MASTER_ADDR --master_port=$MASTER_PORT src/train.py --deepspeed_config ds.json"
