"""An unmodified plain DDP script, as users have them: env ranks, gloo, train, all_gather,
destroy_process_group, exit 0. No noderun import."""

import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
torch.manual_seed(0)
model = DDP(torch.nn.Linear(8, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
data = torch.randn(64, 8, generator=torch.Generator().manual_seed(rank))
for _ in range(5):
    optimizer.zero_grad()
    loss = model(data).pow(2).mean()
    loss.backward()
    optimizer.step()
losses = [torch.zeros(1) for _ in range(world)]
dist.all_gather(losses, loss.detach().reshape(1))
print(f"plain-ddp rank={rank} world={world} losses={[round(x.item(), 4) for x in losses]}")
dist.destroy_process_group()
