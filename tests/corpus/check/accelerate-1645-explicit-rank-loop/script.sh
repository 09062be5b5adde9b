#!/bin/bash
#SBATCH --nodes=2
#SBATCH --gres=gpu:2

LAUNCHER="accelerate launch \
    --multi_gpu \
    --mixed_precision=fp16 \
    --num_machines $SLURM_NNODES \
    --num_processes 4 \
    --main_process_ip=$MASTER_ADDR \
    --main_process_port $MASTER_PORT \
"
CMD="train.py"
SRUN_ARGS=" \
    --kill-on-bad-exit=1 \
    -N 1 -n 1 --gres=gpu:2 --exclusive
    "
All_ADDR=($(scontrol show hostnames $SLURM_JOB_NODELIST))
for mrank in $(seq 0 $((SLURM_NNODES - 1)))
do
srun $SRUN_ARGS -w ${All_ADDR[mrank]} bash -c "$LAUNCHER --machine_rank $mrank $CMD" &
done
wait
