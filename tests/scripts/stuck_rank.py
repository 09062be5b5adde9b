"""Test workload: a training loop whose rank STUCK_RANK gets stuck at step STUCK_STEP.

Plain torch (RANK/WORLD_SIZE only) unless STUCK_NODERUN=1, which calls ``noderun.init()``.
STUCK_MODE: sleep (default: the rank sleeps in its data loading, before the step's
all_reduce, until RUN_DIR/release exists) | deadlock (the rank calls all_gather while the
others call all_reduce) | none (nobody gets stuck). Every step prints ``step N``, then the
loop is quiet for STUCK_QUIET seconds (no output, no CPU). The stuck rank writes
RUN_DIR/stuck_at (the time) when it gets stuck.
"""

import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

RUN_DIR = Path(os.environ.get("NODERUN__RUN_DIR") or os.environ["NODERUN_RUN_DIR"])
STUCK_RANK = int(os.environ.get("STUCK_RANK", "1"))
STUCK_STEP = int(os.environ.get("STUCK_STEP", "5"))
MODE = os.environ.get("STUCK_MODE", "sleep")
QUIET = float(os.environ.get("STUCK_QUIET", "0.05"))
STEPS = int(os.environ.get("STUCK_STEPS", "20"))

if os.environ.get("STUCK_NODERUN") == "1":
    import noderun

    ctx = noderun.init()
else:
    dist.init_process_group("gloo")
rank = dist.get_rank()


def stuck_here(step: int) -> bool:
    return MODE != "none" and rank == STUCK_RANK and step == STUCK_STEP


def load_batch(step: int) -> torch.Tensor:
    if stuck_here(step) and MODE == "sleep":
        (RUN_DIR / "stuck_at").write_text(repr(time.time()))
        while not (RUN_DIR / "release").exists():
            time.sleep(0.1)
    return torch.full((4,), float(step))


def train_step(step: int) -> None:
    batch = load_batch(step)
    if stuck_here(step) and MODE == "deadlock":
        (RUN_DIR / "stuck_at").write_text(repr(time.time()))
        dist.all_gather([torch.zeros(4) for _ in range(dist.get_world_size())], batch)
    else:
        dist.all_reduce(batch)


def main() -> None:
    for step in range(STEPS):
        train_step(step)
        print(f"step {step}", flush=True)
        time.sleep(QUIET)
    dist.barrier()
    dist.destroy_process_group()


main()
sys.stdout.flush()
os._exit(0)  # gloo may abort in interpreter finalization (DESIGN.md): leave without it
