#!/bin/csh
#SBATCH --job-name=DESMOF2
#SBATCH -o slurm-%j.out-%N
#SBATCH --mem=20000
#SBATCH --gres=gpu:1
#SBATCH --time=10:00:00

setenv WORKDIR $HOME/Phase4/modes2/
setenv SCRDIR /scratch/general/u1/Phase4/modes2/
mkdir -p $SCRDIR
cp -r $WORKDIR/* $SCRDIR
cd $SCRDIR
srun python DESMOFourier_v2.py > DESMO.out
