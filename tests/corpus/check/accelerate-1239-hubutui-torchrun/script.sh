#!/bin/bash
#SBATCH --job-name=mingpt
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=1
#SBATCH --cpus-per-gpu=6

source /path/to/anaconda3/etc/profile.d/conda.sh
conda activate env
rm -vf gpt_snapshot.pt
export MASTER_ADDR=$(scontrol show hostnames $SLURM_JOB_NODELIST | head -n 1)
export MASTER_PORT=$(( RANDOM % (50000 - 30000 + 1 ) + 30000 ))
srun torchrun --nnodes 2 --nproc_per_node 1 --rdzv_id $RANDOM --rdzv_backend c10d \
  --rdzv_endpoint $MASTER_ADDR:$MASTER_PORT main.py
