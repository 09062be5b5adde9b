"""Plain torch (no noderun): init_process_group from env, one all_reduce; short timeout.

Reads RANK/WORLD_SIZE, or SLURM_PROCID/SLURM_NTASKS when those are absent (as a hand-written
SLURM script would). Used to make rendezvous failures happen for real.
"""

import datetime
import os

import torch
import torch.distributed as dist

rank = int(os.environ.get("RANK", os.environ.get("SLURM_PROCID", "0")))
world = int(os.environ.get("WORLD_SIZE", os.environ.get("SLURM_NTASKS", "1")))
timeout = datetime.timedelta(seconds=float(os.environ.get("SCENARIO_TIMEOUT", "8")))
print(
    f"rank {rank} of {world} connecting to {os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}",
    flush=True,
)
dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timeout)
tensor = torch.ones(1)
dist.all_reduce(tensor)
print(f"rank {rank}: all_reduce -> {tensor.item()}", flush=True)
dist.destroy_process_group()
