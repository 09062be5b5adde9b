"""Seed 004: predict freeway traffic speed (mph) 15 minutes ahead from the last hour, with DDP.

    noderun run --nnodes 2 --nproc-per-node 2 examples/traffic_regression.py
    noderun run ... examples/traffic_regression.py --resume auto      # or --resume RUN_DIR|CKPT

The data is generated (traffic_data.py beside this script: seeded, several sensors, rush hours,
incidents, noise). metrics.csv holds val_mae/val_rmse in mph and, beside them, the
persistence baseline (tomorrow's speed = the last one seen), which the model must beat.
A checkpoint is written every epoch (and every --checkpoint-every steps); SIGUSR1/SIGTERM
save one at the next step and requeue the SLURM job or exit 75 (noderun.runtime.preemption).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import torch
import traffic_data as traffic  # beside this script
from torch import nn
from torch.utils.data import TensorDataset

import noderun


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--batch-size", type=int, default=128, help="per rank")
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--sensors", type=int, default=8)
    parser.add_argument("--days", type=int, default=28)
    parser.add_argument("--history", type=int, default=12, help="past readings (5 min each)")
    parser.add_argument("--horizon", type=int, default=3, help="readings ahead to predict")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--keep", type=int, default=3, help="checkpoints to keep")
    parser.add_argument("--checkpoint-every", type=int, default=0, help="steps; 0: per epoch")
    parser.add_argument("--resume", default=None, help="auto, a run directory or a checkpoint")
    parser.add_argument("--tensorboard", action="store_true", help="also write TensorBoard")
    return parser.parse_args(argv)


def mlp(inputs: int, hidden: int, dropout: float) -> nn.Module:
    return nn.Sequential(
        nn.Linear(inputs, hidden),
        nn.ReLU(),
        nn.Dropout(dropout),
        nn.Linear(hidden, hidden),
        nn.ReLU(),
        nn.Linear(hidden, 1),
    )


def dataset(w: traffic.Windows) -> TensorDataset:
    """Targets are scaled like the inputs; ``last`` rides along for the persistence baseline."""
    targets = (torch.from_numpy(w.targets) - traffic.SPEED_CENTER) / traffic.SPEED_SCALE
    return TensorDataset(torch.from_numpy(w.inputs), targets, torch.from_numpy(w.last))


def evaluate(
    ctx: noderun.Context, model: nn.Module, loader: torch.utils.data.DataLoader
) -> dict[str, float]:
    """val_loss (scaled MSE), val_mae/val_rmse in mph and the persistence baseline's, all ranks."""
    model.eval()
    sums = {"sq": 0.0, "abs": 0.0, "base_sq": 0.0, "base_abs": 0.0, "n": 0.0}
    with torch.no_grad():
        for inputs, targets, last in loader:
            predicted = model(inputs.to(ctx.device)).squeeze(1).cpu()
            error_mph = (predicted - targets) * traffic.SPEED_SCALE
            base_mph = last - (targets * traffic.SPEED_SCALE + traffic.SPEED_CENTER)
            sums["sq"] += float((error_mph**2).sum())
            sums["abs"] += float(error_mph.abs().sum())
            sums["base_sq"] += float((base_mph**2).sum())
            sums["base_abs"] += float(base_mph.abs().sum())
            sums["n"] += len(targets)
    total = ctx.all_reduce_sum(sums)
    n = max(total["n"], 1.0)
    return {
        "val_loss": total["sq"] / n / traffic.SPEED_SCALE**2,
        "val_mae": total["abs"] / n,
        "val_rmse": (total["sq"] / n) ** 0.5,
        "persistence_mae": total["base_abs"] / n,
        "persistence_rmse": (total["base_sq"] / n) ** 0.5,
    }


def train(args: argparse.Namespace) -> None:
    torch.set_num_threads(1)  # several ranks share the cores
    with noderun.init() as ctx:
        torch.manual_seed(args.seed)
        config = traffic.TrafficConfig(sensors=args.sensors, days=args.days, seed=args.seed)
        train_w, val_w = traffic.train_val(config, args.history, args.horizon)
        train_set, val_set = dataset(train_w), dataset(val_w)
        train_loader = ctx.loader(train_set, args.batch_size, shuffle=True, seed=args.seed)
        val_loader = ctx.loader(val_set, 1024, shuffle=False)
        model = ctx.prepare(mlp(train_w.inputs.shape[1], args.hidden, args.dropout))
        optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=1e-4)
        scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(
            optimizer, T_max=args.epochs * len(train_loader)
        )
        loop = noderun.TrainingLoop(
            ctx,
            model,
            optimizer,
            scheduler,
            resume=args.resume,  # before anything is written: bad input changes nothing
            keep=args.keep,
            metrics=["persistence_mae", "persistence_rmse"],
            tensorboard=args.tensorboard,
            checkpoint_every=args.checkpoint_every,
        )
        loss_fn = nn.MSELoss()
        ctx.print(
            f"training on {ctx.world_size} ranks ({ctx.backend}, {ctx.device}): "
            f"{config.sensors} sensors x {config.days} days, {len(train_set)} train / "
            f"{len(val_set)} val windows, {len(train_loader)} steps per epoch"
        )
        row: dict[str, float] = {}
        with loop:
            for epoch in loop.epochs(args.epochs):
                for inputs, targets, _ in loop.steps(train_loader):
                    optimizer.zero_grad(set_to_none=True)
                    loss = loss_fn(model(inputs.to(ctx.device)).squeeze(1), targets.to(ctx.device))
                    loss.backward()
                    optimizer.step()
                    scheduler.step()
                    loop.log(len(targets), train_loss=loss.item())
                row = loop.end_epoch(**evaluate(ctx, model, val_loader))
                ctx.print(
                    f"epoch {epoch}/{args.epochs} train_loss={row['train_loss']:.4f} "
                    f"val_mae={row['val_mae']:.3f} mph val_rmse={row['val_rmse']:.3f} mph "
                    f"(persistence {row['persistence_mae']:.3f} / {row['persistence_rmse']:.3f}) "
                    f"{row['epoch_time_sec']:.2f} s, "
                    f"{row['throughput_samples_per_sec']:.0f} samples/s"
                )
        if row:
            verdict = "beats" if row["val_mae"] < row["persistence_mae"] else "does NOT beat"
            ctx.print(
                f"final val_mae {row['val_mae']:.3f} mph, val_rmse {row['val_rmse']:.3f} mph; "
                f"persistence baseline val_mae {row['persistence_mae']:.3f} mph, "
                f"val_rmse {row['persistence_rmse']:.3f} mph; the model {verdict} it"
            )


if __name__ == "__main__":
    sys.exit(noderun.run_main(lambda: train(parse(sys.argv[1:]))))
