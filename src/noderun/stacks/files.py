"""The files a rank leaves under ``RUN_DIR/logs`` for the launcher: the contract of both sides.

- ``rank<R>.progress``: a little-endian step counter the rank keeps memory-mapped (8 bytes;
  what the stall watch reads), then where ``TrainingLoop`` is (``POSITION``: its global step and
  epoch, -1 before the first step or in step mode; the first step and time of this attempt and
  the time of the last step, for the rank's own steps per second).
- ``rank<R>.stack``: a header line naming the pid and signal, then what faulthandler dumps
  when the rank gets that signal.

No torch, no psutil: ranks and launchers both import this.
"""

from __future__ import annotations

import dataclasses
import struct
from pathlib import Path

COUNTER = struct.Struct("<Q")
POSITION = struct.Struct("<qqqdd")  # step, epoch, first step, first time, last time
PROGRESS_SIZE = COUNTER.size + POSITION.size
STACK_HEADER = "# noderun faulthandler pid={pid} signal={signal}\n"


def progress_file(run_dir: str | Path, rank: int) -> Path:
    return Path(run_dir) / "logs" / f"rank{rank}.progress"


def stack_file(run_dir: str | Path, rank: int) -> Path:
    return Path(run_dir) / "logs" / f"rank{rank}.stack"


def read_progress(path: Path) -> int | None:
    """A rank's step counter (None if unreadable)."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(COUNTER.size)
    except OSError:
        return None
    return int(COUNTER.unpack(data)[0]) if len(data) == COUNTER.size else None


@dataclasses.dataclass(frozen=True)
class Position:
    """Where a rank's TrainingLoop is, from its progress file."""

    step: int
    epoch: int | None  # None in step mode
    steps_per_sec: float | None  # over this attempt's steps so far


def read_progress_and_position(path: Path) -> tuple[int | None, Position | None]:
    """The rank's step counter and training position, in one read (None: unreadable; no
    position before the first TrainingLoop step or in a file written without one)."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(PROGRESS_SIZE)
    except OSError:
        return None, None
    if len(data) < COUNTER.size:
        return None, None
    count = int(COUNTER.unpack_from(data)[0])
    return count, _position(data) if len(data) == PROGRESS_SIZE else None


def _position(data: bytes) -> Position | None:
    step, epoch, first, began, last = POSITION.unpack_from(data, COUNTER.size)
    if step < 0:
        return None
    rate = (step - first) / (last - began) if last > began and step > first else None
    return Position(step, epoch if epoch >= 0 else None, rate)
