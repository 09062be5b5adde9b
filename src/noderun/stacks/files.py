"""The files a rank leaves under ``RUN_DIR/logs`` for the launcher: the contract of both sides.

- ``rank<R>.progress``: 8 bytes, a little-endian step counter the rank keeps memory-mapped.
- ``rank<R>.stack``: a header line naming the pid and signal, then what faulthandler dumps
  when the rank gets that signal.

No torch, no psutil: ranks and launchers both import this.
"""

from __future__ import annotations

import struct
from pathlib import Path

COUNTER = struct.Struct("<Q")
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
