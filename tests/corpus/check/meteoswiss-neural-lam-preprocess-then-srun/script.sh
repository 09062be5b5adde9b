#!/bin/bash -l
#SBATCH --job-name=NeurWP
#SBATCH --time=24:00:00
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=4
#SBATCH --exclusive
#SBATCH --output=lightning_logs/neurwp_out.log

export PREPROCESS=false
export DATASET="cosmo"
export MODEL="hi_lam"
conda activate neural-lam
if [ "$PREPROCESS" = true ]; then
    python create_static_features.py --boundaries 60 --dataset $DATASET
    python create_grid_features.py --dataset $DATASET
fi
echo "Training model"
if [ "$MODEL" = "hi_lam" ]; then
    srun -ul python train_model.py --dataset $DATASET --model hi_lam --graph hierarchical
else
    srun -ul python train_model.py --dataset $DATASET
fi
