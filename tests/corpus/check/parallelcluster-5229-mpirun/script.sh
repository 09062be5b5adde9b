#!/bin/bash
#SBATCH --exclusive
#SBATCH --ntasks-per-node=8

# Temporary workaround for a Slurm 23.02 bug
export SLURM_TASKS_PER_NODE="8(x2)"
module load openmpi
mpirun -x FI_PROVIDER=efa -x NCCL_DEBUG=INFO /opt/nccl-tests/build/all_reduce_perf -b 8 -e 1G -f 2 -g 1
