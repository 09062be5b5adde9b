#!/bin/bash
#SBATCH --nodes=1
#SBATCH --ntasks=1
#SBATCH --gres=gpu:1
#SBATCH --mem=20G
#SBATCH --job-name=cgcnn2
#SBATCH --output output_%j/stdout.%j
#SBATCH --error output_%j/stderr.%j

OUTDIR=output_${SLURM_JOB_ID}
mkdir -p "$OUTDIR"
cgcnn-ft --full-set data.csv --train-ratio 0.8 --job-id "$SLURM_JOB_ID"
