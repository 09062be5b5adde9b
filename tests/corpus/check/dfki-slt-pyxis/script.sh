srun \
--container-image=/netscratch/enroot/pytorch_20.10.sqsh \
--container-mounts=/netscratch/software:/netscratch/software:ro,/home/u/slt:/workspace \
--gpus=1 \
--mem=64G \
python -m signjoey train configs/phoenix.yaml
