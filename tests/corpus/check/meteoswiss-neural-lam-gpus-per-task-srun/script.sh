#!/bin/bash -l
#SBATCH --job-name=NeurWP
#SBATCH --output=lightning_logs/neurwp.out
#SBATCH --nodes=2
#SBATCH --gpus-per-node=4
#SBATCH --ntasks-per-node=4

conda activate neural-ddp
export OMP_NUM_THREADS=16
# Run the script with torchrun
srun -ul --gpus-per-task=1 python train_model.py \
    --dataset "straka" --n_workers 8 --batch_size 8 --model "graph_lam"
