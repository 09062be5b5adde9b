#!/bin/bash
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=40

export MASTER_ADDR=$(scontrol show hostnames | head -n1)
export MASTER_PORT=12345
srun --ntasks-per-node 40 bash -c 'RANK=$SLURM_PROCID WORLD_SIZE=$SLURM_NPROCS python distprog.py'
