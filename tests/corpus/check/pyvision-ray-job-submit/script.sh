#!/bin/bash
#SBATCH --job-name=ray-job
#SBATCH --nodes=1
#SBATCH --cpus-per-task=1
#SBATCH --gpus-per-task=0
#SBATCH --ntasks-per-node=1
#SBATCH --no-requeue

set -xe
head_node_ip=10.140.60.106
RAY_ADDRESS="http://$head_node_ip:8265" ray job submit --working-dir . -- bash ./run_train_single_node.sh
