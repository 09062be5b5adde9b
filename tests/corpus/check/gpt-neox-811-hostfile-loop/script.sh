#!/bin/bash
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gres=gpu:8

hostfile=/fsx/$(whoami)/hostfiles/hosts_$SLURM_JOBID
rm $hostfile &> /dev/null
for i in `scontrol show hostnames $SLURM_NODELIST`
do
    echo $i slots=8 >>$hostfile
done
export DLTS_HOSTFILE=$hostfile
python ./deepy.py train.py configs/125M.yml
