"""Two (or N) gloo ranks on this machine for a benchmark: spawned, rendezvous on a free port,
and rank 0's result handed back to the benchmark's main process."""

from __future__ import annotations

import os
import queue as queue_module
import time
from collections.abc import Callable
from typing import Any

import torch.multiprocessing as mp

from noderun.backends.ports import free_port


def _start(
    rank: int,
    world: int,
    port: int,
    run_dir: str,
    worker: Callable[..., Any],
    args: tuple,
    out: Any,
) -> None:
    os.environ.update(
        RANK=str(rank), LOCAL_RANK="0", WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port), NODERUN_RUN_DIR=run_dir,
    )  # fmt: skip
    result = worker(*args)
    if rank == 0:
        out.put(result)


def run_two_ranks(
    worker: Callable[..., Any], args: tuple, run_dir: str, timeout: float, world: int = 2
) -> Any:
    """``worker(*args)`` on ranks 0 and 1, or 0..world-1 (RANK, WORLD_SIZE, MASTER_* and
    NODERUN_RUN_DIR set for ``noderun.init()``); returns what rank 0's call returned."""
    port = free_port()
    context = mp.get_context("spawn")
    queue = context.Queue()
    procs = [
        context.Process(target=_start, args=(rank, world, port, run_dir, worker, args, queue))
        for rank in range(world)
    ]
    for proc in procs:
        proc.start()
    deadline = time.monotonic() + timeout
    while True:  # a rank that died must end the benchmark, not leave it waiting
        try:
            result = queue.get(timeout=1.0)
            break
        except queue_module.Empty:
            dead = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
            if dead or time.monotonic() > deadline:
                for proc in procs:
                    proc.kill()
                why = f"benchmark ranks failed (exit codes {dead}) or timed out"
                raise SystemExit(why) from None
    for proc in procs:
        proc.join(timeout=60)
    return result
