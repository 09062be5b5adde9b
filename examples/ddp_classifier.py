"""DDP training of a small CNN on scikit-learn's handwritten digits (examples/digits.py).

    noderun run --nnodes 2 --nproc-per-node 2 examples/ddp_classifier.py --epochs 12

Every rank trains on its DistributedSampler shard; metrics are averaged across ranks; rank 0
writes metrics.csv and a checkpoint per epoch into the run directory. ``--resume auto`` (or a
run directory, or a checkpoint) continues exactly where a run stopped; SIGUSR1/SIGTERM save a
checkpoint at the next step and requeue the SLURM job or exit 75.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import digits  # beside this script: sklearn's digits, sklearn not imported
import torch
from torch import nn

import noderun


def small_cnn() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(32 * 4 * 4, 64),
        nn.ReLU(),
        nn.Linear(64, 10),
    )


def evaluate(ctx: noderun.Context, model: nn.Module, loader: torch.utils.data.DataLoader) -> dict:
    """Loss and accuracy over the whole validation set, summed across ranks."""
    model.eval()
    loss_fn = nn.CrossEntropyLoss(reduction="sum")
    totals = {"loss": 0.0, "correct": 0.0, "count": 0.0}
    with torch.no_grad():
        for images, labels in loader:
            images, labels = images.to(ctx.device), labels.to(ctx.device)
            logits = model(images)
            totals["loss"] += loss_fn(logits, labels).item()
            totals["correct"] += (logits.argmax(1) == labels).sum().item()
            totals["count"] += len(labels)
    totals = ctx.all_reduce_sum(totals)
    return {
        "val_loss": totals["loss"] / totals["count"],
        "val_accuracy": totals["correct"] / totals["count"],
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--batch-size", type=int, default=16, help="per rank")
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--val-fraction", type=float, default=0.2)
    parser.add_argument("--keep", type=int, default=3, help="checkpoints to keep")
    parser.add_argument("--resume", default=None, help="auto, a run directory or a checkpoint")
    parser.add_argument("--tensorboard", action="store_true", help="also write TensorBoard")
    args = parser.parse_args(argv)

    torch.set_num_threads(1)  # several ranks share the cores
    with noderun.init() as ctx:
        torch.manual_seed(args.seed)
        train_set, val_set = digits.datasets(args.seed, args.val_fraction)
        train = ctx.loader(train_set, args.batch_size, shuffle=True, seed=args.seed)
        val = ctx.loader(val_set, 256, shuffle=False)
        model = ctx.prepare(small_cnn())
        optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
        loss_fn = nn.CrossEntropyLoss()
        loop = noderun.TrainingLoop(
            ctx,
            model,
            optimizer,
            resume=args.resume,  # before anything is written: bad input changes nothing
            keep=args.keep,
            metrics=["val_accuracy"],
            tensorboard=args.tensorboard,
        )
        ctx.print(
            f"training on {ctx.world_size} ranks ({ctx.backend}, {ctx.device}): "
            f"{len(train_set)} train / {len(val_set)} val digits"
        )
        row: dict[str, float] = {}
        with loop:
            for epoch in loop.epochs(args.epochs):
                for images, labels in loop.steps(train):
                    images, labels = images.to(ctx.device), labels.to(ctx.device)
                    optimizer.zero_grad(set_to_none=True)
                    loss = loss_fn(model(images), labels)
                    loss.backward()
                    optimizer.step()
                    loop.log(len(labels), train_loss=loss.item())
                row = loop.end_epoch(**evaluate(ctx, model, val))
                ctx.print(
                    f"epoch {epoch}/{args.epochs} train_loss={row['train_loss']:.4f} "
                    f"val_loss={row['val_loss']:.4f} val_accuracy={row['val_accuracy']:.4f} "
                    f"({row['epoch_time_sec']:.2f} s, "
                    f"{row['throughput_samples_per_sec']:.0f} samples/s)"
                )
        if row:
            ctx.print(f"final validation accuracy {row['val_accuracy']:.4f}")


if __name__ == "__main__":
    sys.exit(noderun.run_main(main))
