"""One way to replace a file so that a reader never sees half of it: write a temporary name in
the same folder, optionally fsync, rename over the target. ``durable=True`` also fsyncs the
folder, so the new file survives a crash of the machine (run.json, checkpoints' metadata);
files rewritten often and cheap to lose (a summary, a progress file) skip the fsyncs."""

from __future__ import annotations

import os
from pathlib import Path


def fsync_path(path: str | os.PathLike[str]) -> None:
    """fsync a file or a directory (directories make renames durable)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_bytes(path: str | os.PathLike[str], data: bytes, *, durable: bool = True) -> None:
    """Replace ``path`` with ``data`` atomically (unique temporary name per process)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        with open(tmp, "wb") as handle:
            handle.write(data)
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        tmp.replace(path)
    except OSError as err:  # named after the file it was for, not its temporary name
        tmp.unlink(missing_ok=True)
        raise OSError(err.errno, err.strerror, str(path)) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if durable:
        fsync_path(path.parent)


def write_text(path: str | os.PathLike[str], text: str, *, durable: bool = True) -> None:
    write_bytes(path, text.encode(), durable=durable)
