"""The benchmark's site script: the digits example's local training, with or without FLARE.

    flare_site.py --site site-1 --epochs 4 [--rounds 5 --no-flare]

With FLARE, FederatedSite's timings land in the run dir (flare_rounds.json); without, the
same loop runs --rounds times and rank 0 writes local_rounds.json there.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
from torch import nn

import noderun
from noderun.flare import FederatedSite

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples" / "flare"))
from digits_data import Net, site_data


def train_round(
    ctx: noderun.Context, model: nn.Module, loader: object, epochs: int, r: int
) -> None:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    for epoch in range(epochs):
        ctx.set_epoch(loader, r * epochs + epoch)  # type: ignore[arg-type]
        for images, labels in loader:  # type: ignore[attr-defined]
            optimizer.zero_grad()
            loss_fn(model(images), labels).backward()
            optimizer.step()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--site", default="site-1")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-flare", action="store_true")
    args = parser.parse_args()
    started = time.time()
    with noderun.init() as ctx:
        train, _ = site_data(args.site)
        model = ctx.prepare(Net())
        loader = ctx.loader(train, batch_size=16, seed=0)
        if args.no_flare:
            rounds = []
            for r in range(args.rounds):
                t0 = time.perf_counter()
                train_round(ctx, model, loader, args.epochs, r)
                ctx.all_reduce_mean({"loss": 0.0})  # the metrics reduce a round ends with
                rounds.append({"round": r, "train_s": time.perf_counter() - t0})
            if ctx.is_main:
                record = {"started_at": started, "rounds": rounds}
                (ctx.run_dir / "local_rounds.json").write_text(json.dumps(record) + "\n")
            return
        with FederatedSite(ctx) as site:
            for fl_round in site.rounds(model):
                train_round(ctx, model, loader, args.epochs, fl_round.number)
                site.send(model, metrics={"accuracy": 0.0}, steps=len(train) * args.epochs)


if __name__ == "__main__":
    main()
