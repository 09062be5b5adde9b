"""Atomic checkpoints: temporary name, fsync, rename, ``.complete`` marker last; keep the latest k."""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from noderun.errors import UsageError

STATE_FILE = "state.pt"
META_FILE = "meta.json"
COMPLETE = ".complete"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def is_complete(path: Path) -> bool:
    return (path / COMPLETE).is_file()


def checkpoints(directory: Path) -> list[Path]:
    """Complete checkpoints under ``directory``, oldest first (tags sort by name)."""
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.iterdir() if p.is_dir() and is_complete(p))


def latest(directory: Path) -> Path | None:
    """The newest complete checkpoint, or None; partial ones are never returned."""
    found = checkpoints(directory)
    return found[-1] if found else None


def save(
    state: Mapping[str, Any],
    directory: Path,
    tag: str,
    keep: int = 3,
    meta: Mapping[str, Any] | None = None,
) -> Path:
    """Write ``state`` as ``directory/tag`` atomically; call on one rank only (rank 0)."""
    directory.mkdir(parents=True, exist_ok=True)
    final = directory / tag
    tmp = directory / f".{tag}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    with open(tmp / STATE_FILE, "wb") as handle:
        torch.save(dict(state), handle)
        handle.flush()
        os.fsync(handle.fileno())
    info = {"tag": tag, "time": time.time(), "format": "full", **(meta or {})}
    (tmp / META_FILE).write_text(json.dumps(info, indent=2, default=str))
    _fsync_dir(tmp)
    if final.exists():
        shutil.rmtree(final)
    tmp.rename(final)
    _fsync_dir(directory)
    (final / COMPLETE).write_text("")  # last: a checkpoint without it is never loaded
    _fsync_dir(final)
    for old in checkpoints(directory)[:-keep] if keep > 0 else []:
        shutil.rmtree(old, ignore_errors=True)
    return final


def load(path: Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """The saved state of a complete checkpoint (``weights_only=True``); one-line errors."""
    if not path.exists():
        raise UsageError(f"checkpoint {path} does not exist", "pass a path under checkpoints/")
    if not is_complete(path):
        raise UsageError(
            f"checkpoint {path} is incomplete (no {COMPLETE} marker)",
            "it was interrupted while being written; use an earlier one",
        )
    try:
        state = torch.load(path / STATE_FILE, map_location=map_location, weights_only=True)
    except Exception as err:
        raise UsageError(f"checkpoint {path / STATE_FILE} is unreadable: {err}", "") from None
    if not isinstance(state, dict):
        raise UsageError(f"checkpoint {path} does not hold a state dict", "")
    return state
