#!/bin/bash
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=4

function torchrun-launcher(){
  export MASTER_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"
  if [ "$SYSTEMNAME" = juwelsbooster ] \
        || [ "$SYSTEMNAME" = jurecadc ]; then
      export MASTER_ADDR="${MASTER_ADDR}i"
  fi
  export MASTER_PORT=54123
  srun --cpu-bind=none --ntasks-per-node=1 \
    bash -c "torchrun \
    --nnodes=$SLURM_NNODES \
    --nproc_per_node=$SLURM_GPUS_PER_NODE \
    --rdzv_id=$SLURM_JOB_ID \
    --rdzv_conf=is_host=\$(((SLURM_NODEID)) && echo 0 || echo 1) \
    --rdzv_backend=c10d \
    --rdzv_endpoint=$MASTER_ADDR:$MASTER_PORT \
    $1"
}

torchrun-launcher "train.py --epochs 3"
