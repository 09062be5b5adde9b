"""Save/load throughput of noderun checkpoints against plain torch.save/torch.load and DCP.

Same state, same run, alternating order, median of --reps:

- full (DDP) state: an MLP's weights + AdamW state (about --size-mb MB) written by
  ``Checkpointer.save`` (serialized at once; fsync, rename, marker in a background thread) vs
  ``torch.save`` to one file, and read by ``Checkpointer.resume`` vs
  ``torch.load(weights_only=True)`` + ``load_state_dict``. Shown apart, not in the headline:
  the time until the checkpoint is complete on disk (``save(wait=True)``: a new file, fsyncs,
  rename, marker, pruning) vs ``torch.save`` + fsync over the same file (durable, not atomic).
- sharded: the same model under FSDP2 on 2 gloo processes, ``Checkpointer.save``/``resume``
  vs ``torch.distributed.checkpoint.save``/``load`` of ``get_state_dict``.

    .venv/bin/python bench/checkpoint.py [--size-mb 192] [--reps 5]

Ratios are medians of per-repetition ratios (both sides run back to back in each repetition,
order alternating). A load takes tens of milliseconds from the page cache, so within each
repetition every load runs LOAD_TRIES times, alternating sides, and its best time counts
(as timeit does); saves run SAVE_TRIES times each, likewise. Ends with one
line: the worst ratio, target >= 0.90.
"""

from __future__ import annotations

import argparse
import itertools
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn
from two_ranks import run_two_ranks

TARGET = 0.90
LOAD_TRIES = 3
SAVE_TRIES = 2  # saves wait on the disk: noisy
WIDTH = 2048  # one Linear(2048, 2048) is 16 MiB of float32 weights


def build(size_mb: int) -> tuple[nn.Module, torch.optim.Optimizer]:
    """An MLP whose weights + AdamW moments take about ``size_mb`` MB, one step taken."""
    torch.manual_seed(0)
    layers = max(1, round(size_mb / 3 / (WIDTH * WIDTH * 4 / 2**20)))
    model = nn.Sequential(*(nn.Linear(WIDTH, WIDTH) for _ in range(layers)))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(4, WIDTH)).sum().backward()
    optimizer.step()
    return model, optimizer


def state_mb(model: nn.Module, optimizer: torch.optim.Optimizer) -> float:
    tensors = list(model.state_dict().values())
    for per_param in optimizer.state_dict()["state"].values():
        tensors += [t for t in per_param.values() if isinstance(t, torch.Tensor)]
    return sum(t.numel() * t.element_size() for t in tensors) / 2**20


def timed(action: Callable[[], Any]) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def fsynced_torch_save(obj: Any, path: Path) -> None:
    with open(path, "wb") as handle:
        torch.save(obj, handle)
        handle.flush()
        os.fsync(handle.fileno())


def bench_full(size_mb: int, reps: int, root: Path) -> dict[str, list[float]]:
    import noderun
    from noderun.runtime.training_state import Checkpointer, Position

    model, optimizer = build(size_mb)
    ctx = noderun.init(run_dir=root / "run", environ={})
    ckpt = Checkpointer(ctx, model, optimizer, keep=1)
    plain = root / "plain.pt"
    names = ("save", "save_durable", "plain", "plain_fsync", "load", "plain_load")
    times: dict[str, list[float]] = {k: [] for k in names}

    def plain_state() -> dict[str, Any]:
        return {"model": model.state_dict(), "optimizer": optimizer.state_dict()}

    def plain_load() -> None:
        state = torch.load(plain, weights_only=True)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])

    count = itertools.count(1)

    def fresh() -> Position:
        step = next(count)
        return Position(step, 0, step)

    actions: list[tuple[str, Callable[[], Any]]] = [
        ("save", lambda: ckpt.save(fresh())),  # returns once serialized; commit runs on
        ("save_durable", lambda: ckpt.save(fresh(), wait=True)),
        ("plain", lambda: torch.save(plain_state(), plain)),
        ("plain_fsync", lambda: fsynced_torch_save(plain_state(), plain)),
        ("load", lambda: ckpt.resume("auto")),
        ("plain_load", plain_load),
    ]
    for rep in range(reps):
        best: dict[str, float] = {}
        for tries, group in ((SAVE_TRIES, actions[:4]), (LOAD_TRIES, actions[4:])):
            for _ in range(tries):
                for name, action in group if rep % 2 == 0 else group[::-1]:
                    ckpt.wait()  # no measurement overlaps another's disk traffic
                    os.sync()
                    best[name] = min(best.get(name, float("inf")), timed(action))
        for name, seconds in best.items():
            times[name].append(seconds)
    ckpt.wait()
    ctx.shutdown()
    return times


def _sharded_worker(size_mb: int, reps: int, root: str) -> dict[str, list[float]]:
    torch.set_num_threads(1)
    from torch.distributed.checkpoint.filesystem import FileSystemReader, FileSystemWriter
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    from torch.distributed.checkpoint.state_dict_loader import load as dcp_load
    from torch.distributed.checkpoint.state_dict_saver import save as dcp_save
    from torch.distributed.fsdp import fully_shard

    import noderun
    from noderun.runtime.training_state import Checkpointer, Position

    ctx = noderun.init()
    torch.manual_seed(0)
    model, optimizer = build(size_mb)
    for layer in model:
        fully_shard(layer)
    fully_shard(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(4, WIDTH)).sum().backward()
    optimizer.step()
    ckpt = Checkpointer(ctx, model, optimizer, keep=1)
    plain = Path(root) / "dcp"

    def dcp_state() -> dict[str, Any]:
        model_state, optim_state = get_state_dict(model, [optimizer])
        return {"model": model_state, "optim": optim_state}

    def plain_save() -> None:
        if ctx.is_main:
            shutil.rmtree(plain, ignore_errors=True)
        ctx.barrier()
        dcp_save(dcp_state(), storage_writer=FileSystemWriter(plain))
        ctx.barrier()

    def plain_load() -> None:
        state = dcp_state()
        dcp_load(state, storage_reader=FileSystemReader(plain))
        set_state_dict(
            model, [optimizer], model_state_dict=state["model"], optim_state_dict=state["optim"]
        )
        ctx.barrier()

    times: dict[str, list[float]] = {k: [] for k in ("save", "plain", "load", "plain_load")}
    count = itertools.count(1)
    for rep in range(reps):
        best_save: dict[str, float] = {}
        for _ in range(SAVE_TRIES):
            step = next(count)
            saves = [("save", lambda s=step: ckpt.save(Position(s, 0, s))), ("plain", plain_save)]
            for name, action in saves if rep % 2 == 0 else saves[::-1]:
                ckpt.wait()  # no measurement overlaps another's disk traffic
                os.sync()
                ctx.barrier()
                best_save[name] = min(best_save.get(name, float("inf")), timed(action))
        for name, seconds in best_save.items():
            times[name].append(seconds)
        loads = [("load", lambda: (ckpt.resume("auto"), ctx.barrier())), ("plain_load", plain_load)]
        ckpt.wait()
        os.sync()
        best: dict[str, float] = {}
        for _ in range(LOAD_TRIES):
            for name, action in loads if rep % 2 == 0 else loads[::-1]:
                ctx.barrier()
                best[name] = min(best.get(name, float("inf")), timed(action))
        for name, seconds in best.items():
            times[name].append(seconds)
    ctx.shutdown()
    return times


def bench_sharded(size_mb: int, reps: int, root: Path) -> dict[str, list[float]]:
    times: dict[str, list[float]] = run_two_ranks(
        _sharded_worker, (size_mb, reps, str(root)), str(root / "sharded-run"), timeout=600
    )
    return times


def report(
    title: str, mb: float, times: dict[str, list[float]], pairs: list[tuple[str, str]]
) -> list[float]:
    """Median throughputs, and the median of the per-repetition ratios (each repetition ran
    both sides back to back, so load from other processes hits both alike)."""
    print(f"{title}: {mb:.0f} MB of state")
    ratios = []
    for ours, theirs in pairs:
        ours_mbs = mb / statistics.median(times[ours])
        theirs_mbs = mb / statistics.median(times[theirs])
        paired = [t / o for o, t in zip(times[ours], times[theirs], strict=True)]
        ratio = statistics.median(paired)
        ratios.append(ratio)
        print(
            f"  {ours:>12} noderun {ours_mbs:7.0f} MB/s   {theirs:<11} {theirs_mbs:7.0f} MB/s"
            f"   ratio {ratio:.2f} (per repetition {min(paired):.2f}..{max(paired):.2f})"
        )
    return ratios


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=192)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    model, optimizer = build(args.size_mb)
    mb = state_mb(model, optimizer)
    del model, optimizer
    with tempfile.TemporaryDirectory(prefix="noderun-bench-ckpt-", dir=".") as tmp:
        root = Path(tmp)
        full = bench_full(args.size_mb, args.reps, root)
        ratios = report(
            "full state (DDP, rank 0 writes)", mb, full, [("save", "plain"), ("load", "plain_load")]
        )
        report("  durable, not in the headline", mb, full, [("save_durable", "plain_fsync")])
        print(
            "  save: until training may go on (serialized; fsync, rename, marker follow in a "
            "thread); save_durable: until complete on disk"
        )
        sharded = bench_sharded(args.size_mb, args.reps, root)
        ratios += report(
            "sharded (FSDP2, 2 ranks, DCP)",
            mb,
            sharded,
            [("save", "plain"), ("load", "plain_load")],
        )
    worst = min(ratios)
    print(
        f"ratio noderun/plain throughput = {worst:.2f} "
        f"(worst of save and load, full and sharded; target >= {TARGET:.2f})"
    )


if __name__ == "__main__":
    main()
