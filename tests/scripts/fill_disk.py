"""Checkpoints a 156 KiB model every epoch for 12 epochs (fault table: a full disk).

noderun run --run-dir <a 300 KiB tmpfs> tests/scripts/fill_disk.py
"""

import torch

import noderun
from noderun.runtime.training_state import Checkpointer, Position

ctx = noderun.init()
torch.manual_seed(0)
model = torch.nn.Linear(200, 200)
ckpt = Checkpointer(ctx, model, keep=3)
for epoch in range(1, 13):
    ckpt.save(Position(epoch, 0, epoch))
    ctx.barrier()
ckpt.wait()
print("trained all 12 epochs", flush=True)
