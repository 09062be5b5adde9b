#!/bin/bash
# 2 node SLURM script for Lightning programs
#SBATCH --job-name=lightning-launcher
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=96
#SBATCH --gres=gpu:8
#SBATCH --exclusive

# PTL doesn't need a special launcher
LAUNCHER="python -u"
PROGRAM="my_lightning_test.py"
export CMD="$LAUNCHER $PROGRAM"
SRUN_ARGS=" \
    --wait=60 \
    --kill-on-bad-exit=1 \
    "
srun $SRUN_ARGS --jobid $SLURM_JOB_ID bash -c "$CMD" 2>&1 | tee -a main_log.txt
