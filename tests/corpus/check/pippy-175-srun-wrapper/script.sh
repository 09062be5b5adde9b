srun -N2 -p train --gpus-per-node=8 --ntasks-per-node=8 --gpus-per-task=1 ./pippy_wrapper.sh
