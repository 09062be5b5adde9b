"""A tiny step-based job for TrainingLoop(max_steps=...): dropout, a shuffled loader, passes.

noderun run --nproc-per-node 2 tests/scripts/step_trainer.py [--resume auto] [--max-steps 12]
40 samples at 2 ranks x 4: 5 steps per pass, so 12 steps cross two pass boundaries.
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn

import noderun


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--resume", default=None)
    parser.add_argument("--max-steps", type=int, default=12)
    parser.add_argument("--step-sleep", type=float, default=0.0, help="seconds each step sleeps")
    args = parser.parse_args()
    data = torch.Generator().manual_seed(1)
    dataset = torch.utils.data.TensorDataset(
        torch.randn(40, 4, generator=data), torch.randn(40, 1, generator=data)
    )
    with noderun.init() as ctx:
        torch.manual_seed(0)
        net = nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.3), nn.Linear(8, 1))
        model = ctx.prepare(net)
        optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
        loader = ctx.loader(dataset, batch_size=4)
        with noderun.TrainingLoop(
            ctx,
            model,
            optimizer,
            resume=args.resume,
            max_steps=args.max_steps,
            log_every=2,
            checkpoint_every=4,
            checkpoint_min_sec=0,
        ) as loop:
            for x, y in loop.iterate(loader):
                loss = nn.functional.mse_loss(model(x), y)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                time.sleep(args.step_sleep)
                row = loop.end_step(len(y), train_loss=loss.detach())
                if row is not None:
                    ctx.print(f"step {loop.global_step}: train_loss {row['train_loss']:.6f}")


if __name__ == "__main__":
    main()
