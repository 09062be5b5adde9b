"""``RUN_DIR/cancel.json``: `noderun cancel` asked this run to end (the launcher, the ranks and
the verb read it).

Written before any signal is sent, so whoever ends the run sees why: the launcher records the
attempt as ``cancelled`` (not preempted or interrupted), and a rank that saved its checkpoint
does not requeue the SLURM job. The launcher removes it when the next attempt starts. Standard
library only: every rank imports it.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from pathlib import Path

FILE = "cancel.json"


def request(run_dir: str | os.PathLike[str], now: bool) -> None:
    """Ask the run to end: at once (``now``) or after every rank saved a checkpoint."""
    data = {"how": "now" if now else "graceful", "time": time.time()}
    data["by"] = f"pid {os.getpid()} on {socket.gethostname()}"
    path = Path(run_dir) / FILE
    temporary = path.with_name(f".{FILE}.{os.getpid()}")
    temporary.write_text(json.dumps(data) + "\n")
    os.replace(temporary, path)


def requested(run_dir: str | os.PathLike[str] | None) -> str | None:
    """How the run was asked to end ("graceful", "now"), None when it was not."""
    if not run_dir:
        return None
    try:
        data = json.loads((Path(run_dir) / FILE).read_text())
    except (OSError, ValueError):
        return None
    how = data.get("how") if isinstance(data, dict) else None
    return how if how in ("graceful", "now") else None


def clear(run_dir: str | os.PathLike[str]) -> None:
    with contextlib.suppress(OSError):
        (Path(run_dir) / FILE).unlink()
