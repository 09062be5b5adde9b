#!/bin/bash
#SBATCH --nodes=3
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=8

ORCH_PROCID=2
export ORCH_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | sed -n "$((ORCH_PROCID + 1))p")

srun bash <<'EOF'
if [ "$SLURM_PROCID" -eq "$ORCH_PROCID" ]; then
    uv run orchestrator --addr "$ORCH_ADDR"
else
    uv run trainer --orch "$ORCH_ADDR"
fi
EOF
