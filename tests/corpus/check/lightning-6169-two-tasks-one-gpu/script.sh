#!/bin/bash
#SBATCH --cpus-per-task=4
#SBATCH --gres=gpu:p6000:1
#SBATCH --mem=32GB
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=2
#SBATCH --signal=USR1@90

srun --output /home/u/mm/%j_%t_log.out --error /home/u/mm/%j_%t_log.err --unbuffered \
  /home/u/.venvs/mm/bin/python /home/u/mm/slurm_test.py /home/u/mm
