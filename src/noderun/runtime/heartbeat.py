"""What a rank leaves for noderun's stall watcher and ``noderun stacks``.

- ``RUN_DIR/logs/rank<R>.progress``: a step counter in a memory-mapped file. ``beat()`` adds
  one (a store to memory, no system call); the launcher reads the file to see progress.
  ``position()`` records TrainingLoop's global step and epoch after it (``noderun status``).
- ``RUN_DIR/logs/rank<R>.stack``: ``faulthandler`` appends every thread's stack to it when the
  rank gets ``STACK_SIGNAL``: the fallback when py-spy cannot attach.

Installed by ``noderun.init()`` only when a noderun launcher started the rank (``RankContract``
run directory).
"""

from __future__ import annotations

import contextlib
import faulthandler
import mmap
import os
import signal
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO

from noderun.stacks.files import (
    COUNTER,
    POSITION,
    PROGRESS_SIZE,
    STACK_HEADER,
    progress_file,
    stack_file,
)
from noderun.topology.contract import RankContract

STACK_SIGNAL = signal.SIGUSR2


class _Counter:
    def __init__(self, path: Path) -> None:
        with open(path, "w+b") as handle:
            handle.write(COUNTER.pack(0) + POSITION.pack(-1, -1, -1, 0.0, 0.0))
            handle.flush()
            self._map = mmap.mmap(handle.fileno(), PROGRESS_SIZE)
        self.value = 0
        self._first: tuple[int, float] | None = None

    def beat(self) -> None:
        self.value += 1
        COUNTER.pack_into(self._map, 0, self.value)

    def position(self, step: int, epoch: int) -> None:
        now = time.monotonic()
        if self._first is None:
            self._first = (step, now)
        POSITION.pack_into(self._map, COUNTER.size, step, epoch, *self._first, now)


_counter: _Counter | None = None
_stack_file: IO[str] | None = None  # kept open: faulthandler writes to its descriptor


def beat() -> None:
    """One step of progress (no-op unless installed)."""
    if _counter is not None:
        _counter.beat()


def position(step: int, epoch: int | None = None) -> None:
    """TrainingLoop finished global step ``step`` (of ``epoch``; None in step mode)."""
    if _counter is not None:
        _counter.position(step, -1 if epoch is None else epoch)


def install(rank: int, environ: Mapping[str, str]) -> None:
    """Start the progress counter and the faulthandler fallback, best effort."""
    global _counter, _stack_file
    run_dir = RankContract.from_env(environ).run_dir
    if not run_dir or _counter is not None:
        return
    with contextlib.suppress(OSError):
        progress_file(run_dir, rank).parent.mkdir(parents=True, exist_ok=True)
        _counter = _Counter(progress_file(run_dir, rank))
    previous = signal.getsignal(STACK_SIGNAL)
    if previous not in (signal.SIG_DFL, None):
        return  # the script handles this signal itself: leave it alone
    with contextlib.suppress(OSError):
        path = stack_file(run_dir, rank)
        _stack_file = open(path, "w", buffering=1)  # noqa: SIM115
        _stack_file.write(STACK_HEADER.format(pid=os.getpid(), signal=int(STACK_SIGNAL)))
        faulthandler.register(STACK_SIGNAL, file=_stack_file, all_threads=True)
