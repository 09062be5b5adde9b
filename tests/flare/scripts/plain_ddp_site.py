"""A FLARE site script that does NOT import noderun: plain torch.distributed + FLARE client API.

Rank 0 talks to FLARE; the model and a stop flag go to the other ranks by broadcast; the
weights are averaged by all_reduce after one local step (a stand-in for DDP training).
"""

import os

import torch
import torch.distributed as dist
from nvflare import client as flare
from nvflare.app_common.abstract.fl_model import FLModel

dist.init_process_group("gloo")
rank = dist.get_rank()
flare.init()  # reads RANK: only rank 0 opens a FLARE session
model = torch.nn.Linear(4, 2)
while True:
    box = [flare.receive() if rank == 0 else None]
    dist.broadcast_object_list(box, src=0)
    received = box[0]
    if received is None:
        break
    model.load_state_dict({k: torch.as_tensor(v) for k, v in received.params.items()})
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.01 * (rank + 1))
            dist.all_reduce(p)
            p.div_(dist.get_world_size())
    if rank == 0:
        print(f"PLAIN round {received.current_round} world {dist.get_world_size()}", flush=True)
        flare.send(FLModel(params=model.state_dict(), metrics={"accuracy": 0.5}))
dist.barrier()
dist.destroy_process_group()
os._exit(0)
