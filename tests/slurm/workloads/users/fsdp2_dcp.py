"""Written like the FSDP2 example: fully_shard each block and the root, train a step, save
with torch.distributed.checkpoint (DCP) into --ckpt, load it back and compare."""

import argparse
import os

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_model_state_dict
from torch.distributed.fsdp import fully_shard

parser = argparse.ArgumentParser()
parser.add_argument("--ckpt", required=True)
args = parser.parse_args()
dist.init_process_group("gloo")
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
for block in (model[0], model[2]):
    fully_shard(block)
fully_shard(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
model(torch.randn(4, 8)).sum().backward()
optimizer.step()
state = {"model": get_model_state_dict(model)}
dcp.save(state, checkpoint_id=args.ckpt)
dcp.load(state, checkpoint_id=args.ckpt)
if dist.get_rank() == 0:
    print(
        f"fsdp2 world {dist.get_world_size()} saved {sorted(os.listdir(args.ckpt))[:3]}", flush=True
    )
dist.destroy_process_group()
