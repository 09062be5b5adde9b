"""What noderun's profiling hooks cost when profiling is off (no NODERUN_PROFILE, no --profile).

One process, the digits classifier's CNN, alternating repetitions (ABBA order) of the same
loop: bare (DataLoader, forward, backward, step) and with every hook site noderun's runtime
has on that path, called every step: the batches go through ``profiling.profile_batches`` (what
``EpochTimer.iterate`` and ``Checkpointer.steps`` do), the model through ``profiling.watch``
(what ``ctx.prepare`` does), plus a ``profiling.phase("comm")`` and a
``profiling.phase("checkpoint")`` block (what ``ctx.all_reduce_*`` and ``Checkpointer.save``
open; real loops open them once per epoch, this one every step). The ratio is the median of
the per-repetition ratios. A last run with profiling on (steps 5:10, no trace) shows the cost
inside a window, for scale.

    .venv/bin/python bench/profile_overhead.py [--reps 41] [--steps 60]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

import torch
from example_module import load_example
from torch import nn

from noderun.runtime import profiling

TARGET = 1.01


def loop(
    model: nn.Module, optimizer: torch.optim.Optimizer, loader: Iterable, hooks: bool
) -> float:
    loss_fn = nn.CrossEntropyLoss()
    batches = profiling.profile_batches(loader) if hooks else loader
    began = time.perf_counter()
    for images, labels in batches:
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(images), labels)
        loss.backward()
        optimizer.step()
        if hooks:
            with profiling.phase("comm"):
                value = loss.item()
            with profiling.phase("checkpoint"):
                pass
        else:
            value = loss.item()
    del value
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--reps", type=int, default=41)
    parser.add_argument("--steps", type=int, default=60, help="steps per repetition")
    args = parser.parse_args()
    torch.set_num_threads(1)
    os.environ.pop("NODERUN_PROFILE", None)
    example = load_example()
    train_set, _ = example.digits.datasets(0, 0.2)
    loader = torch.utils.data.DataLoader(
        torch.utils.data.Subset(train_set, range(16 * args.steps)), batch_size=16
    )

    def make() -> tuple[nn.Module, torch.optim.Optimizer]:
        torch.manual_seed(0)
        model = example.small_cnn()
        return model, torch.optim.Adam(model.parameters(), lr=3e-3)

    bare_model, bare_opt = make()
    off_model, off_opt = make()
    profiling.watch(off_model)  # off: installs nothing, as in ctx.prepare
    assert profiling.current() is None
    for _ in range(3):  # warm-up
        loop(bare_model, bare_opt, loader, False)
        loop(off_model, off_opt, loader, True)
    bare, off, ratios = [], [], []
    for rep in range(args.reps):
        order = (False, True) if rep % 2 == 0 else (True, False)
        times = {}
        for hooks in order:
            model, opt = (off_model, off_opt) if hooks else (bare_model, bare_opt)
            times[hooks] = loop(model, opt, loader, hooks)
        bare.append(times[False])
        off.append(times[True])
        ratios.append(times[True] / times[False])
    with tempfile.TemporaryDirectory() as root:
        on_env = {"NODERUN_PROFILE": "steps=5:10,trace=0"}
        profiling.install(0, Path(root), on_env, cuda=False)
        on_model, on_opt = make()
        profiling.watch(on_model)
        on = loop(on_model, on_opt, loader, True)
    per_step = statistics.median(bare) / args.steps * 1e3
    print(f"{args.reps} alternating reps x {args.steps} steps, 1 process, {os.cpu_count()} cores")
    print(f"bare loop: median {statistics.median(bare):.4f} s ({per_step:.3f} ms/step)")
    print(f"profiling off: median {statistics.median(off):.4f} s")
    print(f"per-rep ratios: min {min(ratios):.3f} max {max(ratios):.3f}")
    print(f"one repetition with steps 5-10 profiled (no trace): {on:.4f} s")
    ratio = statistics.median(ratios)
    verdict = "met" if ratio <= TARGET else "missed"
    print(f"ratio profile-off/bare = {ratio:.3f} (target <= {TARGET}) {verdict}")


if __name__ == "__main__":
    main()
