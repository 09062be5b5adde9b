"""A plain torch DDP script of the kind users already have (seed 003): no noderun import.

Ranks from RANK/LOCAL_RANK/WORLD_SIZE (torchrun, noderun) or SLURM_PROCID/SLURM_LOCALID/
SLURM_NTASKS (plain srun). Trains a tiny regression for a few iterations, all_gathers the
final loss, prints it, optionally saves a checkpoint on rank 0 (``--out DIR``), and calls
destroy_process_group(). Exit 0.
"""

import argparse
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def env(name: str, slurm: str) -> int:
    return int(os.environ.get(name, os.environ.get(slurm, "0")))


parser = argparse.ArgumentParser()
parser.add_argument("--out", type=Path, help="rank 0 saves OUT/checkpoints/model.pt")
parser.add_argument("--iterations", type=int, default=20)
# leave with os._exit(0) after destroy_process_group(): sidesteps torch 2.13's gloo abort in
# interpreter teardown (issue 8.1), which tests of other things must not trip over
parser.add_argument("--exit-hard", action="store_true")
args = parser.parse_args()

rank, local_rank = env("RANK", "SLURM_PROCID"), env("LOCAL_RANK", "SLURM_LOCALID")
world = int(os.environ.get("WORLD_SIZE", os.environ.get("SLURM_NTASKS", "1")))
dist.init_process_group("gloo", rank=rank, world_size=world)
torch.manual_seed(0)
model = DistributedDataParallel(torch.nn.Linear(8, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
generator = torch.Generator().manual_seed(rank)
for step in range(args.iterations):
    x = torch.randn(32, 8, generator=generator)
    loss = torch.nn.functional.mse_loss(model(x), x.sum(dim=1, keepdim=True))
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if rank == 0 and step % 5 == 0:
        print(f"iteration {step}: loss {loss.item():.4f}", flush=True)
losses = [torch.zeros(1) for _ in range(world)]
dist.all_gather(losses, loss.detach().reshape(1))
finals = [round(t.item(), 4) for t in losses]
print(f"rank {rank} (local {local_rank}) of {world}: final losses {finals}")
if rank == 0 and args.out is not None:
    (args.out / "checkpoints").mkdir(parents=True, exist_ok=True)
    torch.save(model.module.state_dict(), args.out / "checkpoints" / "model.pt")
dist.destroy_process_group()
if args.exit_hard:
    sys.stdout.flush()
    os._exit(0)
