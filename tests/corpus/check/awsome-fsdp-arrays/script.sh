#!/bin/bash
#SBATCH --nodes=4
#SBATCH --job-name=fsdp
#SBATCH --output=logs/%x_%j.out
#SBATCH --exclusive

set -ex;
GPUS_PER_NODE=8
export FSX_MOUNT=$(pwd):/fsx
if [ ! -z $CONTAINER_IMAGE ];
then
    export TRAIN_SCRIPT=./train.py
    declare -a ARGS=(
        --container-image $CONTAINER_IMAGE
        --container-mounts $FSX_MOUNT
    )
fi
declare -a TORCHRUN_ARGS=(
    --nproc_per_node=$GPUS_PER_NODE
    --nnodes=$SLURM_JOB_NUM_NODES
    --rdzv_id=$SLURM_JOB_ID
    --rdzv_backend=c10d
    --rdzv_endpoint=$(hostname)
)
export TORCHRUN=torchrun
export TRAIN_SCRIPT=${TRAIN_SCRIPT:=../src/train.py}
declare -a TRAINING_ARGS=(
    --max_steps=50
    --sharding_strategy=full # https://pytorch.org/docs/stable/fsdp.html
)
AUTO_RESUME=""
if [ -d "/opt/sagemaker_cluster" ]; then
    AUTO_RESUME="--auto-resume=1"
fi
srun ${AUTO_RESUME} -l "${ARGS[@]}" ${TORCHRUN} "${TORCHRUN_ARGS[@]}" $TRAIN_SCRIPT "${TRAINING_ARGS[@]}"
