#!/bin/bash
#SBATCH --job-name=lightning-launcher
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=8
#SBATCH --cpus-per-task=12
#SBATCH --gres=gpu:8

# PTL doesn't need a special launcher
LAUNCHER="python -u"
export CMD="$LAUNCHER lightning-test.py"
SRUN_ARGS=" \
    --wait=60 \
    --kill-on-bad-exit=1 \
    --jobid $SLURM_JOB_ID \
    "
srun $SRUN_ARGS bash -c "$CMD" 2>&1 | tee -a main_log.txt
