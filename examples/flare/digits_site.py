"""One site of the federated digits example: DDP over the site's ranks, FLARE through rank 0.

FLARE runs it through noderun (``Site.command``); every round the global model arrives in
``model`` on every rank, the ranks train it on the site's share for ``--epochs`` epochs, and
rank 0 sends the weights and the rank-averaged metrics back.
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

import torch
from digits_data import Net, accuracy, site_data, test_data
from torch import nn

import noderun
from noderun.flare import FederatedSite, unwrap


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--site", required=True)
    parser.add_argument("--epochs", type=int, default=2, help="local epochs per round")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--eval-csv", type=Path, help="rank 0 appends the global model's scores")
    args = parser.parse_args()
    torch.manual_seed(0)
    with noderun.init() as ctx, FederatedSite(ctx) as site:
        train, val = site_data(args.site)
        test = test_data()
        model = ctx.prepare(Net())
        loader = ctx.loader(train, batch_size=args.batch_size, seed=0)
        loss_fn = nn.CrossEntropyLoss()
        for fl_round in site.rounds(model):
            global_accuracy = accuracy(unwrap(model), test)
            optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
            losses = []
            for epoch in range(args.epochs):
                ctx.set_epoch(loader, fl_round.number * args.epochs + epoch)
                for images, labels in loader:
                    optimizer.zero_grad()
                    loss = loss_fn(model(images.to(ctx.device)), labels.to(ctx.device))
                    loss.backward()
                    optimizer.step()
                    losses.append(loss.item())
            metrics = site.send(
                model,
                metrics={
                    "accuracy": global_accuracy,
                    "train_loss": sum(losses) / max(len(losses), 1),
                    "val_accuracy": accuracy(unwrap(model), val),
                },
                steps=len(train) * args.epochs,
            )
            ctx.print(f"{fl_round.site} round {fl_round.number}/{fl_round.total}: {metrics}")
            if ctx.is_main and args.eval_csv:
                new = not args.eval_csv.exists()
                with args.eval_csv.open("a", newline="") as out:
                    writer = csv.writer(out)
                    if new:
                        writer.writerow(["round", "site", "world_size", *metrics])
                    writer.writerow(
                        [fl_round.number, fl_round.site, ctx.world_size, *metrics.values()]
                    )


if __name__ == "__main__":
    main()
