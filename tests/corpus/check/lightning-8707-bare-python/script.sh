#!/bin/bash
#SBATCH --time=00:10:00
#SBATCH --ntasks-per-node=4
#SBATCH --cpus-per-task=4
#SBATCH --gpus=8
#SBATCH --mem-per-cpu=1536M
#SBATCH --nodes=2

export OMP_NUM_THREADS=$SLURM_CPUS_ON_NODE
module load python/3.8 cuda/10.1
source ~/venv/bin/activate
cd ~/test/
python test.py
