#!/bin/bash
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=1
#SBATCH --gres=gpu:8
#SBATCH --exclusive

export MASTER_ADDR=$(scontrol show hostnames $SLURM_JOB_NODELIST | head -n 1)
export MASTER_PORT=6000
LAUNCHER="python -m torch.distributed.run \
  --nproc_per_node 8 --nnodes $SLURM_NNODES --node_rank $SLURM_PROCID \
  --master_addr $MASTER_ADDR --master_port $MASTER_PORT"
CMD="-m training.run --output_dir out --model_name_or_path base"
srun --jobid $SLURM_JOB_ID bash -c "$LAUNCHER $CMD"
