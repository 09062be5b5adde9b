srun -K  --job-name=pretrain \
	 --partition=A100-80GB,H100\
	 --gpus=1 \
	 --cpus-per-task=8 \
	 --output output/console.%A_%a.out \
	 --error output/console.%A_%a.error  \
         --container-image=/netscratch/enroot/pytorch_23.07.sqsh \
         --container-workdir=`pwd` \
         --container-mounts=/netscratch:/netscratch,`pwd`:`pwd` \
         --export="NCCL_SOCKET_IFNAME=bond,NCCL_IB_HCA=mlx5" \
          install.sh python Cluster_Pretraining.py "$@" &
