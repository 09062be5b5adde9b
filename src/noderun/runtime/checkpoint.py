"""Checkpoint files: one directory per checkpoint, written atomically, ``.complete`` marker last.

Layout of ``RUN_DIR/checkpoints/<tag>/``:

- ``state.pt``   full state (``format: full``; DDP or a single process), written by rank 0,
  with ``ranks.pt``: every rank's RNG states and extras, gathered while training goes on; or
- ``shards/``    torch.distributed.checkpoint shards of model + optimizer, one file per rank,
  and ``trainer.pt`` with everything else (``format: sharded``; FSDP2/DTensor);
- ``meta.json``  tag, format, epoch/step, world size, time;
- ``.complete``  written last: a directory without it is never loaded.

Everything is written under ``.<tag>.tmp``, fsynced, renamed to ``<tag>``, then marked.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch

from noderun.atomic import fsync_path
from noderun.errors import UsageError

STATE_FILE = "state.pt"
RANKS_FILE = "ranks.pt"
SHARDS_DIR = "shards"
TRAINER_FILE = "trainer.pt"
META_FILE = "meta.json"
COMPLETE = ".complete"
CHECKPOINTS_DIR = "checkpoints"
# Test seam for crash safety: sleep before the marker, e.g. "epoch-0002:30" or "30" (any tag)
PAUSE_ENV = "NODERUN_DEBUG_CHECKPOINT_PAUSE"


def write_bytes_durably(path: Path, data: bytes) -> None:
    with open(path, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


def torch_save_durably(obj: Any, path: Path) -> None:
    """``torch.save`` then fsync, so a rename afterwards never exposes an empty file."""
    with open(path, "wb") as handle:
        torch.save(obj, handle)
        handle.flush()
        os.fsync(handle.fileno())


PathLike = str | os.PathLike[str]  # every public function takes either


def is_complete(path: PathLike) -> bool:
    return (Path(path) / COMPLETE).is_file()


def checkpoints(directory: PathLike) -> list[Path]:
    """Complete checkpoints under ``directory``, oldest first (tags sort by name)."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    return sorted(
        p
        for p in directory.iterdir()
        if p.is_dir() and not p.name.startswith(".") and is_complete(p)
    )


def latest(directory: PathLike) -> Path | None:
    """The newest complete checkpoint, or None; partial ones are never returned."""
    found = checkpoints(directory)
    return found[-1] if found else None


def temporary_dir(directory: Path, tag: str) -> Path:
    """Where ``tag`` is written before it is committed; the same name on every rank."""
    return directory / f".{tag}.tmp"


def start(directory: Path, tag: str) -> Path:
    """A fresh, empty temporary directory for ``tag`` (left-overs of a crash are removed)."""
    directory.mkdir(parents=True, exist_ok=True)
    tmp = temporary_dir(directory, tag)
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    return tmp


def commit(tmp: Path, directory: Path, tag: str, meta: Mapping[str, Any], keep: int) -> Path:
    """Write meta, fsync, rename ``tmp`` to ``directory/tag``, mark it, keep the newest ``keep``."""
    info = {"tag": tag, "time": time.time(), **meta}
    write_bytes_durably(tmp / META_FILE, json.dumps(info, indent=2, default=str).encode())
    fsync_path(tmp)
    final = directory / tag
    old = directory / f".{tag}.old"
    if final.exists():
        shutil.rmtree(old, ignore_errors=True)
        final.rename(old)  # an earlier checkpoint of the same tag goes only after the new one lands
    tmp.rename(final)
    fsync_path(directory)
    _debug_pause(tag)
    write_bytes_durably(final / COMPLETE, b"")
    fsync_path(final)
    shutil.rmtree(old, ignore_errors=True)
    if keep > 0:
        for stale in checkpoints(directory)[:-keep]:
            shutil.rmtree(stale, ignore_errors=True)
    return final


def _debug_pause(tag: str) -> None:
    raw = os.environ.get(PAUSE_ENV, "")
    if not raw:
        return
    wanted, _, seconds = raw.rpartition(":")
    if wanted and wanted != tag:
        return
    sys.stderr.write(f"noderun: {PAUSE_ENV}: pausing {seconds} s before marking {tag} complete\n")
    sys.stderr.flush()
    time.sleep(float(seconds))


def save(
    state: Mapping[str, Any],
    directory: PathLike,
    tag: str,
    keep: int = 3,
    meta: Mapping[str, Any] | None = None,
) -> Path:
    """Write a full ``state`` as ``directory/tag`` atomically; call on one rank only (rank 0)."""
    return save_async(state, Path(directory), tag, keep, meta).wait()


class PendingCommit:
    """A checkpoint whose bytes are written and whose fsync + rename + marker run in a thread.

    Training goes on while the disk catches up; ``wait()`` returns the committed directory
    (or raises what went wrong). The thread is not a daemon: the interpreter waits for it.
    """

    def __init__(self, commit_it: Callable[[], Path], after: PendingCommit | None = None) -> None:
        self.path: Path | None = None
        self.error: BaseException | None = None
        self.after = after  # the commit this one waits for first
        self._commit = commit_it
        self._thread = threading.Thread(target=self._run, name="noderun-checkpoint-commit")
        self._thread.start()

    def _run(self) -> None:
        try:
            if self.after is not None:
                self.after.wait()  # in order: an earlier checkpoint is never marked after this
            self.path = self._commit()
        except BaseException as err:  # surfaced by wait() in the training thread
            self.error = err

    def wait_for_earlier(self) -> None:
        """Block until the commit this one queued behind is done (errors surface in wait)."""
        if self.after is not None:
            self.after._thread.join()

    def wait(self) -> Path:
        self._thread.join()
        if self.error is not None:
            raise self.error
        assert self.path is not None
        return self.path


def save_async(
    state: Mapping[str, Any],
    directory: Path,
    tag: str,
    keep: int = 3,
    meta: Mapping[str, Any] | None = None,
    before_commit: Callable[[Path], None] | None = None,
    after: PendingCommit | None = None,
) -> PendingCommit:
    """Take ``state`` now (later changes to it do not matter); make it durable, rename and
    mark it complete in the background, after ``before_commit(tmp)``. Rank 0 only.

    A small CPU state is snapshotted (tensors cloned: a memcpy) and serialized in the
    background too; anything else is serialized here, so no device memory is doubled."""
    snapshot = _snapshot(state)
    info = {"format": "full", **(meta or {})}
    if snapshot is None and after is not None:
        after.wait()  # written here and now: the earlier commit (maybe of this tag) goes first
        after = None

    def write(tmp: Path, taken: Mapping[str, Any]) -> None:
        with open(tmp / STATE_FILE, "wb") as handle:
            torch.save(dict(taken), handle)

    if snapshot is None:
        tmp = start(directory, tag)
        write(tmp, state)

    def durable_commit() -> Path:
        here = tmp if snapshot is None else start(directory, tag)
        if snapshot is not None:
            write(here, snapshot)
        if before_commit is not None:
            before_commit(here)
        fsync_path(here / STATE_FILE)
        return commit(here, directory, tag, info, keep)

    return PendingCommit(durable_commit, after)


SNAPSHOT_BYTES = 64 * 1024 * 1024  # up to this much CPU tensor data is cloned, not serialized


def _snapshot(state: Mapping[str, Any]) -> dict[str, Any] | None:
    """A deep copy of ``state`` (tensors cloned) when it holds at most ``SNAPSHOT_BYTES`` of
    CPU tensors; None when it is bigger, on a device, or not plainly copyable."""
    tensors: list[torch.Tensor] = []

    def scan(value: Any) -> bool:
        if isinstance(value, torch.Tensor):
            tensors.append(value)
            return value.device.type == "cpu" and type(value) is torch.Tensor
        if isinstance(value, Mapping):
            return all(scan(v) for v in value.values())
        if isinstance(value, list | tuple):
            return all(scan(v) for v in value)
        return isinstance(value, str | int | float | bool | type(None) | bytes)

    if not scan(state) or sum(t.numel() * t.element_size() for t in tensors) > SNAPSHOT_BYTES:
        return None
    with torch.no_grad():
        return copy.deepcopy(dict(state))


def read_meta(path: PathLike) -> dict[str, Any]:
    """``meta.json`` of a checkpoint; one-line UsageError when missing, partial or unreadable."""
    path = Path(path)
    check_loadable(path)
    try:
        meta = json.loads((path / META_FILE).read_text())
    except (OSError, ValueError) as err:
        raise UsageError(
            f"checkpoint {path / META_FILE} is unreadable ({err})", "resume from an earlier one"
        ) from None
    if not isinstance(meta, dict) or meta.get("format") not in ("full", "sharded"):
        raise UsageError(
            f"checkpoint {path / META_FILE} has no known format", "resume from an earlier one"
        )
    return meta


def check_loadable(path: Path) -> None:
    if not path.exists():
        raise UsageError(
            f"checkpoint {path} does not exist",
            f"pass a directory under {CHECKPOINTS_DIR}/, a run directory, or --resume auto",
        )
    if not path.is_dir():
        raise UsageError(
            f"checkpoint {path} is a file, not a checkpoint directory",
            f"pass its directory (the one holding {META_FILE})",
        )
    if not is_complete(path):
        raise UsageError(
            f"checkpoint {path} is incomplete (no {COMPLETE} marker; its write was interrupted)",
            "resume from an earlier checkpoint",
        )


def torch_load_checked(
    file: Path, map_location: str | torch.device = "cpu", mmap: bool = False
) -> dict[str, Any]:
    """``torch.load(weights_only=True)`` of a checkpoint file; corrupt files give one line.

    ``mmap``: tensors map the file's pages instead of being read into fresh memory; for state
    that is copied into a model at once (resume), this saves one copy of every tensor."""
    try:
        state = torch.load(file, map_location=map_location, weights_only=True, mmap=mmap)
    except FileNotFoundError:
        raise UsageError(
            f"checkpoint file {file} is missing", "resume from an earlier one"
        ) from None
    except Exception as err:
        reason = str(err).strip().splitlines()[0][:160] if str(err).strip() else type(err).__name__
        raise UsageError(
            f"checkpoint file {file} is corrupt or not a torch checkpoint ({reason})",
            "resume from an earlier checkpoint",
        ) from None
    if not isinstance(state, dict):
        raise UsageError(f"checkpoint file {file} does not hold a state dict", "")
    return state


def read_full(
    path: Path, map_location: str | torch.device = "cpu", mmap: bool = False
) -> dict[str, Any]:
    """``state.pt`` merged with ``ranks.pt`` (every rank's RNG states and extras)."""
    state = torch_load_checked(path / STATE_FILE, map_location, mmap)
    if (path / RANKS_FILE).exists():
        state.update(torch_load_checked(path / RANKS_FILE, map_location))
    return state


def resolve(spec: PathLike | None, run_dir: PathLike) -> Path | None:
    """``--resume`` to a checkpoint directory: None (fresh start), ``auto``, or a path.

    ``auto`` is the newest complete checkpoint of ``run_dir`` (None when there is none yet: the
    first start of a requeued job); a run directory means its newest complete checkpoint.
    """
    if spec is None or str(spec) == "":
        return None
    if str(spec) == "auto":
        return latest(Path(run_dir) / CHECKPOINTS_DIR)
    path = Path(spec)
    if path.is_dir() and not (path / META_FILE).exists() and (path / CHECKPOINTS_DIR).is_dir():
        found = latest(path / CHECKPOINTS_DIR)
        if found is None:
            raise UsageError(
                f"run directory {path} has no complete checkpoint under {CHECKPOINTS_DIR}/",
                "start without --resume, or pass another run",
            )
        return found
    check_loadable(path)
    return path
