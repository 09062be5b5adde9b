"""Written like Fabric's examples: `Fabric()` with no arguments, configured by the LT_*
variables `fabric run` sets (LT_ACCELERATOR, LT_DEVICES, LT_NUM_NODES); without them Fabric
runs one device and never forms a group."""

import torch
from lightning.fabric import Fabric

fabric = Fabric()
fabric.launch()
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = fabric.setup(model, optimizer)
for _ in range(3):
    optimizer.zero_grad()
    loss = model(torch.randn(8, 4, device=fabric.device)).pow(2).mean()
    fabric.backward(loss)
    optimizer.step()
print(f"fabric world {fabric.world_size} rank {fabric.global_rank}", flush=True)
