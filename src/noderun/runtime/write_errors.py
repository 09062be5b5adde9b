"""A file a rank could not write (a checkpoint, metrics.csv): said at once, on this rank's console,
with the path and the room left; then training stops (the default) or goes on with a warning.

    NODERUN_ON_WRITE_ERROR=stop   raise WriteError: one line, a non-zero exit (default)
    NODERUN_ON_WRITE_ERROR=warn   one warning per failed write, training goes on
"""

from __future__ import annotations

import errno
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
        f"{_fix(err, path)}; {ON_ERROR_ENV}=warn keeps training without it",
    )


def _fix(err: BaseException, path: Path) -> str:
    """What to do about ``err``: room for a full disk or quota, permissions for a refusal, the
    disk for an I/O error, the folder for one that vanished."""
    code = err.errno if isinstance(err, OSError) else None
    if code in (errno.EACCES, errno.EPERM):
        return f"make {path.parent} writable for this user"
    if code == errno.EROFS:
        return f"{path.parent} is on a read-only filesystem: put the run dir elsewhere"
    if code == errno.EIO:
        return "the disk or network filesystem failed the write: check it (dmesg), then resume"
    if code == errno.ENOENT:
        return f"{path.parent} vanished during the run: whatever removed it must not"
    if code == errno.EDQUOT:
        return "your disk quota is used up: free space, or move the run dir elsewhere"
    return "free space or move the run dir to a larger filesystem"


def say(error: WriteError, mode: str) -> None:
    """The error on this rank's console, as it happens (one write: lines of ranks never mix)."""
    lead = "noderun: warning: " if mode == "warn" else "noderun: error: "
    sys.stderr.write(f"{lead}{error}\n")
    sys.stderr.flush()
