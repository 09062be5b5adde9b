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

import collections
import json
import math
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


class CommitPacer:
    """At most one commit per ``min_sec`` for the checkpoints of one writer.

    A checkpoint whose commit would start sooner waits in its thread until its time; a newer
    checkpoint taken meanwhile replaces it there (the newest wins, no new thread); ``wait()``
    commits it at once. So epochs shorter than ``min_sec`` do not pay a serialization, fsyncs
    and a rename each, and a stop (close, preemption, an exception) still writes the newest.
    """

    def __init__(self, min_sec: float) -> None:
        self.min_sec = min_sec
        self.lock = threading.Lock()
        self._last_started = -math.inf

    def reserve(self, pending: PendingCommit) -> None:
        """In ``pending``'s thread: return when it may commit (its turn, or hurried)."""
        while True:
            with self.lock:
                delay = self._last_started + self.min_sec - time.monotonic()
                if delay <= 0 or pending.hurry.is_set():
                    pending.started = True
                    self._last_started = time.monotonic()
                    return
            pending.hurry.wait(delay)


class PendingCommit:
    """A checkpoint whose bytes are taken and whose write, fsync, rename and marker run in a
    thread.

    Training goes on while the disk catches up; ``wait()`` returns the committed directory
    (or raises what went wrong). The thread is not a daemon: the interpreter waits for it.
    With a ``pacer`` the commit may wait for its turn, and ``replace`` swaps in a newer
    checkpoint until it starts (the replaced one's ``on_drop`` runs).
    """

    def __init__(
        self,
        commit_it: Callable[[], Path],
        after: PendingCommit | None = None,
        pacer: CommitPacer | None = None,
        on_drop: Callable[[], object] | None = None,
    ) -> None:
        self.path: Path | None = None
        self.error: BaseException | None = None
        self.after = after  # the commit this one waits for first
        self.pacer = pacer
        self.started = pacer is None
        self.hurry = threading.Event()
        self._commit = commit_it
        self._on_drop = on_drop
        self._thread = threading.Thread(target=self._run, name="noderun-checkpoint-commit")
        self._thread.start()

    def replace(self, commit_it: Callable[[], Path], on_drop: Callable[[], object] | None) -> bool:
        """Commit ``commit_it`` instead, if this one is still waiting for its turn."""
        if self.pacer is None:
            return False
        with self.pacer.lock:
            if self.started:
                return False
            dropped, self._on_drop = self._on_drop, on_drop
            self._commit = commit_it
        if dropped is not None:
            dropped()
        return True

    def _run(self) -> None:
        try:
            if self.after is not None:
                self.after.join()  # in order: an earlier checkpoint is never marked after this
            if self.pacer is not None:
                self.pacer.reserve(self)
            self.path = self._commit()
        except BaseException as err:  # surfaced by wait() in the training thread
            self.error = err

    def wait_for_earlier(self) -> None:
        """Block until the commit this one queued behind is done (errors surface in wait)."""
        if self.after is not None:
            self.after._thread.join()

    def join(self) -> None:
        """Block until this commit is done; raise what went wrong."""
        self._thread.join()
        if self.error is not None:
            raise self.error

    def wait(self) -> Path:
        """Commit now (no more waiting for its turn); return the committed directory."""
        self.hurry.set()
        self.join()
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
    pacer: CommitPacer | None = None,
    on_drop: Callable[[], object] | None = None,
) -> PendingCommit:
    """Take ``state`` now (later changes to it do not matter); make it durable, rename and
    mark it complete in the background, after ``before_commit(tmp)``. Rank 0 only.

    A small CPU state is copied here (its tensors cloned: a memcpy each) and serialized in
    the background; anything else is serialized straight to its file here, so no device
    memory is doubled. With a ``pacer``, a small CPU state whose commit would start within
    ``pacer.min_sec`` of the last one waits for its turn, and if ``after`` is still waiting
    for its own, this state replaces it there (``after`` is returned; its ``on_drop`` runs).
    A bigger state is on disk already and commits at once."""
    info = {"format": "full", **(meta or {})}
    taken = _cloned(state) if _small_on_cpu(state) else None
    if taken is None:
        if after is not None:
            after.wait()  # written here and now: the earlier commit (maybe of this tag) goes first
            after = None
        tmp = start(directory, tag)
        with open(tmp / STATE_FILE, "wb") as handle:
            torch.save(dict(state), handle)

    def durable_commit() -> Path:
        if taken is None:
            here = tmp
            fsync_path(here / STATE_FILE)
        else:
            here = start(directory, tag)
            torch_save_durably(taken, here / STATE_FILE)
        if before_commit is not None:
            before_commit(here)
        return commit(here, directory, tag, info, keep)

    if taken is None:
        return PendingCommit(durable_commit, after)
    if after is not None and after.replace(durable_commit, on_drop):
        return after  # it was still waiting for its turn: now it commits this one
    return PendingCommit(durable_commit, after, pacer, on_drop)


SNAPSHOT_BYTES = 64 * 1024 * 1024  # up to this much CPU tensor data is cloned, not serialized


def _small_on_cpu(state: Mapping[str, Any]) -> bool:
    """``state`` holds at most ``SNAPSHOT_BYTES`` of plain CPU tensors, and plain data."""
    size = 0

    def scan(value: Any) -> bool:
        nonlocal size
        if isinstance(value, torch.Tensor):
            size += value.numel() * value.element_size()
            return value.device.type == "cpu" and type(value) is torch.Tensor
        if isinstance(value, Mapping):
            return all(scan(v) for v in value.values())
        if isinstance(value, list | tuple):
            return all(scan(v) for v in value)
        return isinstance(value, str | int | float | bool | type(None) | bytes)

    return scan(state) and size <= SNAPSHOT_BYTES


def _cloned(state: Mapping[str, Any]) -> dict[str, Any]:
    """``state`` with every tensor cloned and every container copied (6x faster than
    ``copy.deepcopy``); a tensor found twice (tied weights) is cloned once, so it stays
    shared in the file."""
    memo: dict[int, torch.Tensor] = {}

    def clone(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            if id(value) not in memo:
                memo[id(value)] = value.detach().clone()
            return memo[id(value)]
        if isinstance(value, Mapping):
            copied = {k: clone(v) for k, v in value.items()}
            metadata = getattr(value, "_metadata", None)
            if metadata is None:
                return copied
            ordered = collections.OrderedDict(copied)  # a module's state_dict: versions too
            ordered._metadata = {k: dict(v) for k, v in metadata.items()}  # type: ignore[attr-defined]
            return ordered
        if isinstance(value, list):
            return [clone(v) for v in value]
        if isinstance(value, tuple):
            return tuple(clone(v) for v in value)
        return value  # str, int, float, bool, None, bytes: immutable

    with torch.no_grad():
        return {k: clone(v) for k, v in state.items()}


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
