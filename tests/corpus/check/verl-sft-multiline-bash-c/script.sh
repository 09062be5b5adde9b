#!/bin/bash
#SBATCH --job-name=sft-multinode
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gres=gpu:8
#SBATCH --output=sft_%j.out

set -xeuo pipefail
export CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7
verl_workdir="$HOME/verl"
nodes_array=($(scontrol show hostnames "$SLURM_JOB_NODELIST"))
head_node=${nodes_array[0]}
head_node_ip=$(srun --nodes=1 --ntasks=1 -w "$head_node" hostname --ip-address)
export MASTER_ADDR=$head_node_ip
export MASTER_PORT=29500
export NODE_RANK=$SLURM_PROCID
srun --nodes=$SLURM_JOB_NUM_NODES --ntasks=$SLURM_JOB_NUM_NODES --ntasks-per-node=1 \
    bash -c "
    export MASTER_ADDR=$MASTER_ADDR
    export NODE_RANK=\$SLURM_PROCID
    export ROCR_VISIBLE_DEVICES=\"\"
    cd $verl_workdir
    torchrun --nnodes=$SLURM_JOB_NUM_NODES \
        --nproc_per_node=8 \
        --master_addr=\$MASTER_ADDR \
        --master_port=\$MASTER_PORT \
        --node_rank=\$NODE_RANK \
        -m verl.trainer.fsdp_sft_trainer \
        data.train_files=\"$verl_workdir/train.parquet\" \
        trainer.logger='[\"console\",\"wandb\"]'
    " 2>&1 | tee sft.log
