"""Seed 000's mistake, without noderun: every node's local rank 0 initializes FLARE as rank 0."""

import os

import torch.distributed as dist
from nvflare import client as flare

dist.init_process_group("gloo")
flare.init(rank=os.environ["LOCAL_RANK"])  # local rank, not global: node 1's rank 0 claims 0
model = flare.receive()
print("received", model is not None, flush=True)
