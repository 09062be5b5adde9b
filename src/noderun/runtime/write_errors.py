"""A file a rank could not write (a checkpoint, metrics.csv): said at once, on this rank's console,
with the path and the room left; then training stops (the default) or goes on with a warning.

    NODERUN_ON_WRITE_ERROR=stop   raise WriteError: one line, a non-zero exit (default)
    NODERUN_ON_WRITE_ERROR=warn   one warning per failed write, training goes on
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

from noderun import disk_room
from noderun.errors import NoderunError, UsageError

ON_ERROR_ENV = "NODERUN_ON_WRITE_ERROR"
POLICIES = ("stop", "warn")


class WriteError(NoderunError):
    """A file of the run could not be written (ENOSPC, EDQUOT, EIO, EACCES, a vanished folder)."""


def policy(environ: Mapping[str, str] | None = None) -> str:
    """``stop`` or ``warn`` from ``NODERUN_ON_WRITE_ERROR`` (default ``stop``); bad: UsageError."""
    raw = (os.environ if environ is None else environ).get(ON_ERROR_ENV, "").strip().lower()
    if not raw:
        return "stop"
    if raw not in POLICIES:
        raise UsageError(f"{ON_ERROR_ENV}={raw!r} is not one of {', '.join(POLICIES)}", "unset it")
    return raw


def free_space(path: Path) -> str:
    """ "12.0 KiB free on /runs/x" for the nearest folder of ``path`` that exists."""
    free = disk_room.free_bytes(path)
    return "free space unknown" if free is None else f"{disk_room.human(free)} free there"


def reason(err: BaseException) -> str:
    """The first line of an error, errno and all (``[Errno 28] No space left on device``)."""
    if isinstance(err, OSError) and err.strerror:
        return f"[Errno {err.errno}] {err.strerror}"
    text = str(err).strip().splitlines()
    return text[0][:200] if text else type(err).__name__


def write_error(what: str, path: Path, err: BaseException, rank: int | None = None) -> WriteError:
    """The one-line error for ``what`` (``checkpoint``, ``metrics.csv``) at ``path``."""
    who = f"rank {rank}: " if rank is not None else ""
    return WriteError(
        f"{who}{what} {path} could not be written: {reason(err)} ({free_space(path)})",
        f"free space or move the run dir to a larger filesystem; {ON_ERROR_ENV}=warn keeps "
        "training without it",
    )


def say(error: WriteError, mode: str) -> None:
    """The error on this rank's console, as it happens (one write: lines of ranks never mix)."""
    lead = "noderun: warning: " if mode == "warn" else "noderun: error: "
    sys.stderr.write(f"{lead}{error}\n")
    sys.stderr.flush()
