"""A noderun FLARE site whose rank 1 raises in round 1 (the site must fail, the server hear it)."""

import torch

import noderun
from noderun.flare import FederatedSite

with noderun.init() as ctx, FederatedSite(ctx) as site:
    model = ctx.prepare(torch.nn.Linear(4, 2))
    for fl_round in site.rounds(model):
        if fl_round.number == 1 and ctx.rank == 1:
            raise RuntimeError("rank 1 fails on purpose in round 1")
        site.send(model, metrics={"accuracy": 0.5}, steps=1)
