#!/bin/bash
#SBATCH --job-name=vl-lora
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-node=8
#SBATCH --time=08:00:00
#SBATCH --output=logs/vl_lora_%j.out
#SBATCH --error=logs/vl_lora_%j.err

MODEL=${1:-small}
CONTAINER=/lustre/images/nemo.sqsh
mkdir -p logs
srun --container-image=$CONTAINER --container-mounts=$PWD:/workspace \
  python /opt/bridge/examples/finetune_vl.py --model "$MODEL" --peft lora
