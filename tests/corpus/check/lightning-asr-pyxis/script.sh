#!/bin/bash

srun \
--gpus=1 \
--container-image=/netscratch/enroot/pytorch_22.10.sqsh \
--container-mounts=/ds:/ds,/netscratch:/netscratch,"`pwd`":"`pwd`" \
--container-workdir="`pwd`" \
install.sh python3 run.py -config 'config_train/test.yaml' -debug True
echo 'running'
