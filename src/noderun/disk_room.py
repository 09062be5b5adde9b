"""Is there room for the run's checkpoints? One rule for ``run``, ``submit``, doctor and the
runtime: at least ``CHECKPOINTS`` checkpoints of the model (the newest one's size when the run
directory has one, else an estimate from the model), and ``MIN_FREE`` when nothing is known."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

CHECKPOINTS = 3  # a new one is written beside the last complete one, and one more to spare
MIN_FREE = 1 << 30  # below 1 GiB free, with no checkpoint to size from: warn
CRITICAL_FREE = 100 << 20  # doctor fails below 100 MiB


def human(count: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if count < 1024:
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return f"{count:.1f} TiB"


def folder_size(path: Path) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                continue
    return total


def newest_checkpoint_size(run_dir: Path) -> int | None:
    """The size of the newest complete checkpoint under ``run_dir/checkpoints``, or None."""
    folder = run_dir / "checkpoints"
    try:
        complete = sorted(p for p in folder.iterdir() if (p / ".complete").is_file())
    except OSError:
        return None
    return folder_size(complete[-1]) if complete else None


def needed(checkpoint_bytes: int | None) -> int:
    """Bytes a run needs free: ``CHECKPOINTS`` checkpoints, or ``MIN_FREE`` when unknown."""
    return CHECKPOINTS * checkpoint_bytes if checkpoint_bytes else MIN_FREE


def free_bytes(path: Path) -> int | None:
    here = Path(path).absolute()
    while not here.exists() and here != here.parent:
        here = here.parent
    try:
        return shutil.disk_usage(here).free
    except OSError:
        return None


def shortfall(run_dir: Path, checkpoint_bytes: int | None = None) -> str | None:
    """One warning line when ``run_dir``'s filesystem has less room than the rule asks, else
    None. ``checkpoint_bytes``: a checkpoint's size if known (else the newest one's there)."""
    size = checkpoint_bytes or newest_checkpoint_size(run_dir)
    free = free_bytes(run_dir)
    if free is None or free >= needed(size):
        return None
    what = f"{CHECKPOINTS} checkpoints of {human(size)}" if size else f"{human(MIN_FREE)}"
    return (
        f"only {human(free)} free for {run_dir}, less than {what}: checkpoints may fail "
        "to be written (free space, or pass a --run-dir on a larger filesystem)"
    )
