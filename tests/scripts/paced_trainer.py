"""A tiny step job whose every rank prints each step, paced so a test can watch it run.

noderun run --nnodes 2 tests/scripts/paced_trainer.py [--resume auto] [--max-steps 400]
PACED_STEP_SEC (default 0.1) sleeps after each step: 0 finishes at once (a resumed run).
"""

from __future__ import annotations

import argparse
import os
import time

import torch
from torch import nn

import noderun


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--resume", default=None)
    parser.add_argument("--max-steps", type=int, default=400)
    args = parser.parse_args()
    pace = float(os.environ.get("PACED_STEP_SEC", "0.1"))
    torch.set_num_threads(1)
    data = torch.Generator().manual_seed(1)
    dataset = torch.utils.data.TensorDataset(
        torch.randn(40, 4, generator=data), torch.randn(40, 1, generator=data)
    )
    with noderun.init() as ctx:
        torch.manual_seed(0)
        model = ctx.prepare(nn.Linear(4, 1))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        loader = ctx.loader(dataset, batch_size=4)
        with noderun.TrainingLoop(
            ctx, model, optimizer, resume=args.resume, max_steps=args.max_steps, log_every=10
        ) as loop:
            for x, y in loop.iterate(loader):
                loss = nn.functional.mse_loss(model(x), y)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                loop.end_step(len(y), train_loss=loss.detach())
                print(f"rank {ctx.rank} step {loop.global_step}", flush=True)
                time.sleep(pace)


if __name__ == "__main__":
    main()
