"""A tiny real training job for verify/explain tests: metrics.csv, checkpoints, optional crash.

noderun run --nnodes 2 tests/scripts/tiny_trainer.py --epochs 3 [--crash-rank 1 --crash-epoch 2]
"""

from __future__ import annotations

import argparse

import torch

import noderun
from noderun.runtime import checkpoint
from noderun.runtime.metrics import EpochTimer, MetricsLogger


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--crash-rank", type=int, default=-1)
    parser.add_argument("--crash-epoch", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    with noderun.init() as ctx:
        torch.manual_seed(0)
        x = torch.randn(64, 4)
        y = x @ torch.tensor([1.0, -2.0, 0.5, 3.0]) + 0.1
        model = ctx.prepare(torch.nn.Linear(4, 1))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
        metrics = MetricsLogger(ctx.run_dir / "metrics.csv", ctx.is_main, ["val_accuracy"])
        for epoch in range(1, args.epochs + 1):
            if ctx.rank == args.crash_rank and epoch == args.crash_epoch:
                raise RuntimeError(f"tiny_trainer: deliberate crash on rank {ctx.rank}")
            timer = EpochTimer()
            for start in timer.iterate(range(0, 64, 16)):
                optimizer.zero_grad()
                pred = model(x[start : start + 16]).squeeze(1)
                loss = torch.nn.functional.mse_loss(pred, y[start : start + 16])
                loss.backward()
                optimizer.step()
                timer.count(16)
            with torch.no_grad():
                err = model(x).squeeze(1) - y
            row = ctx.all_reduce_mean(
                {
                    "train_loss": loss.item(),
                    "val_loss": float((err**2).mean()),
                    "val_mae": float(err.abs().mean()),
                    "val_rmse": float((err**2).mean().sqrt()),
                    **{k: v for k, v in timer.stats().items() if v is not None},
                }
            )
            metrics.log(epoch=epoch, val_accuracy=0.5, **row)
            if ctx.is_main:
                module = getattr(model, "module", model)
                checkpoint.save_state(
                    {"model": module.state_dict()},
                    ctx.run_dir / "checkpoints",
                    f"epoch-{epoch:04d}",
                    meta={"epoch": epoch, "world_size": ctx.world_size},
                )
            ctx.print(f"epoch {epoch} train_loss={row['train_loss']:.4f}")
            ctx.barrier()


if __name__ == "__main__":
    main()
