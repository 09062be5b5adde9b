#!/bin/bash
#SBATCH --nodes=1
#SBATCH --gpus=8

PREFIX=/lustre/apps
APP=unet
srun --unbuffered -N1 -n2 -G8 \
    --container-image ${PREFIX}/${APP}/pyt-save-21.02.sqsh \
    --container-mounts=${PREFIX}/${APP}:/workspace/${APP} \
    python3 -m torch.distributed.launch --nproc_per_node 4 --use_env \
    /workspace/${APP}/unet_training_workflows.py
