"""Every rank starts with different weights; after broadcast_state all hold rank 0's."""

import json

import torch

import noderun
from noderun.flare.client import broadcast_state

with noderun.init() as ctx:
    torch.manual_seed(ctx.rank)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))
    model[1].num_batches_tracked.fill_(ctx.rank + 7)  # an int64 buffer: its own broadcast
    broadcast_state(model)
    sums = [round(float(t.double().sum()), 6) for t in model.state_dict().values()]
    every = ctx.gather_object(sums)
    torch.manual_seed(0)
    expected = round(float(torch.nn.Linear(3, 4).weight.double().sum()), 6)
    if ctx.is_main:
        print("SUMS " + json.dumps({"ranks": every, "rank0_seed0_weight": expected}), flush=True)
