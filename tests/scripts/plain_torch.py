"""An unmodified plain-torch script: reads RANK/LOCAL_RANK/WORLD_SIZE only, no noderun."""

import os

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
value = torch.tensor([float(rank)])
dist.all_reduce(value)
print(f"plain rank={rank} local_rank={os.environ['LOCAL_RANK']} world={world} sum={value.item():g}")
dist.destroy_process_group()
