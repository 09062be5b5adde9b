"""A noderun FLARE site that honours FLARE's task kinds: trains on train tasks, evaluates on
validate tasks (metrics, no weights), submits its model on submit_model tasks. Every rank
records the kinds it saw in kinds-rank<R>.json in its run dir (the test compares them)."""

import json

import torch

import noderun
from noderun.flare import FederatedSite

with noderun.init() as ctx, FederatedSite(ctx) as site:
    torch.manual_seed(0)
    model = ctx.prepare(torch.nn.Linear(4, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    seen = []
    for fl_round in site.rounds(model):
        data = torch.Generator().manual_seed(int(fl_round.site.rsplit("-", 1)[1]))  # per site
        x, y = torch.randn(16, 4, generator=data), torch.randn(16, 2, generator=data)
        seen.append([fl_round.kind, fl_round.task, fl_round.number])
        if fl_round.is_validate:
            with torch.no_grad():
                loss = float(torch.nn.functional.mse_loss(model(x), y))
            site.send(model, metrics={"val_loss": loss})
            continue
        if fl_round.is_train:
            loss = torch.nn.functional.mse_loss(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        site.send(model, metrics={"train_loss": float(loss.detach())}, steps=1)
    (ctx.run_dir / f"kinds-rank{ctx.rank}.json").write_text(json.dumps(seen))
