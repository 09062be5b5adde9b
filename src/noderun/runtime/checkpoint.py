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
import warnings
from collections.abc import Callable, Mapping
from concurrent.futures import FIRST_COMPLETED, Future
from concurrent.futures import wait as wait_futures
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from noderun import timeline
from noderun.atomic import fsync_path
from noderun.errors import UsageError

if TYPE_CHECKING:  # torch is imported where a tensor is read or written: verify reads
    import torch  # which checkpoints are complete without it

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
        torch_save(obj, handle)
        handle.flush()
        os.fsync(handle.fileno())


class _Writes:
    """A file's ``write`` that keeps the OSError it raised: torch's writer turns a full disk
    into ``unexpected pos 1344 vs 1238``; the errno is what a user can act on."""

    def __init__(self, handle: BinaryIO) -> None:
        self.handle = handle
        self.error: OSError | None = None

    def write(self, data: bytes) -> int:
        try:
            return self.handle.write(data)
        except OSError as err:
            self.error = err
            raise

    def flush(self) -> None:
        self.handle.flush()


def torch_save(obj: Any, handle: BinaryIO) -> None:
    """``torch.save`` into an open file; a failed write raises its own OSError."""
    import torch

    writes = _Writes(handle)
    try:
        torch.save(obj, writes)  # type: ignore[arg-type]
    except RuntimeError:
        if writes.error is not None:
            raise writes.error from None
        raise


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


def save_state(
    state: Mapping[str, Any],
    directory: PathLike,
    tag: str,
    keep: int = 3,
    meta: Mapping[str, Any] | None = None,
) -> Path:
    """Write a full ``state`` as ``directory/tag`` atomically; call on one rank only (rank 0).

    Not collective (``Checkpointer.save`` is: every rank calls it at the same point)."""
    announce(Path(directory))
    return take_full(state, Path(directory), tag, keep, meta)()


def save(
    state: Mapping[str, Any],
    directory: PathLike,
    tag: str,
    keep: int = 3,
    meta: Mapping[str, Any] | None = None,
) -> Path:
    """Deprecated name of ``save_state`` (rank 0 only); ``save`` means ``Checkpointer.save``."""
    warnings.warn(
        "noderun.checkpoint.save is deprecated: use noderun.checkpoint.save_state(state, "
        "directory, tag) on rank 0, or Checkpointer.save(position) on every rank",
        DeprecationWarning,
        stacklevel=2,
    )
    return save_state(state, directory, tag, keep, meta)


# the timeline stage that says a run checkpoints (verify: none at the end is then a FAIL)
CHECKPOINTER_READY = "checkpointer_ready"


def announce(directory: Path) -> None:
    """Say in the run's timeline that this run writes checkpoints into ``directory`` (when it is
    a run directory's ``checkpoints/``), so a run that ends without one is not taken for a run
    that never meant to write any."""
    run_dir = directory.parent
    if (run_dir / "logs").is_dir():
        timeline.stamp(run_dir, CHECKPOINTER_READY, "rank0")


def take_full(
    state: Mapping[str, Any],
    directory: Path,
    tag: str,
    keep: int = 3,
    meta: Mapping[str, Any] | None = None,
    before_commit: Callable[[Path], None] | None = None,
) -> Callable[[], Path]:
    """Take ``state`` now (later changes to it do not matter) and return the rest of its write:
    a call that makes it durable, renames and marks it complete (run it on a ``CommitWorker``).
    ``before_commit(tmp)`` runs in that call, before the rename. Rank 0 only.

    A small CPU state (``small_on_cpu``) is copied here (its tensors cloned: a memcpy each) and
    serialized later; anything else is serialized straight to its file here, so no device memory
    is doubled: no earlier commit of the same tag may still be running then."""
    info = {"format": "full", **(meta or {})}
    taken = _cloned(state) if small_on_cpu(state) else None
    tmp = temporary_dir(directory, tag)
    if taken is None:
        try:
            start(directory, tag)
            with open(tmp / STATE_FILE, "wb") as handle:
                torch_save(dict(state), handle)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)  # the room goes back; earlier ones stay
            raise

    def durable_commit() -> Path:
        try:
            if taken is None:
                fsync_path(tmp / STATE_FILE)
            else:
                start(directory, tag)
                torch_save_durably(taken, tmp / STATE_FILE)
            if before_commit is not None:
                before_commit(tmp)
            return commit(tmp, directory, tag, info, keep)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise

    return durable_commit


class CommitWorker:
    """One background thread that runs checkpoint commits (fsync, rename, marker) in the order
    they come, so training goes on while the disk catches up. ``submit`` returns a Future of the
    committed directory; at most ``depth`` commits wait or run at once (``submit`` blocks for
    room). A commit may be given a time before which it does not start (``not_before``): until
    then ``Future.cancel()`` takes it back, and ``hurry()`` lets it start at once. A daemon:
    ``drain()`` before the process ends (the Checkpointer does, at exit)."""

    def __init__(self, depth: int = 2) -> None:
        self.depth = depth
        self._queue: collections.deque[tuple[Callable[[], Path], Future[Path], float]] = (
            collections.deque()
        )
        self._changed = threading.Condition()
        self._open: list[tuple[Path, Future[Path]]] = []
        self._thread: threading.Thread | None = None

    def submit(
        self, path: Path, job: Callable[[], Path], not_before: float = -math.inf
    ) -> Future[Path]:
        """Run ``job`` (the commit of checkpoint ``path``) after those submitted before, not
        before ``not_before`` (``time.monotonic()``) unless hurried."""
        while len(pending := [f for _, f in self._open if not f.done()]) >= self.depth:
            wait_futures(pending, return_when=FIRST_COMPLETED)
        future: Future[Path] = Future()
        self._open.append((path, future))
        with self._changed:
            self._queue.append((job, future, not_before))
            self._changed.notify_all()
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._serve, name="noderun-checkpoint-commit", daemon=True
            )
            self._thread.start()
        return future

    def cancel(self, future: Future[Path]) -> bool:
        """Take back a commit that has not started (False when it has)."""
        with self._changed:
            taken = future.cancel()
            self._changed.notify_all()
        return taken

    def hurry(self) -> None:
        """Every commit waiting for its time may start now (close, preemption, an exception)."""
        with self._changed:
            self._queue = collections.deque((j, f, -math.inf) for j, f, _ in self._queue)
            self._changed.notify_all()

    def _next(self) -> tuple[Callable[[], Path], Future[Path]]:
        with self._changed:
            while True:
                if not self._queue:
                    self._changed.wait()
                    continue
                job, future, not_before = self._queue[0]
                delay = not_before - time.monotonic()
                if delay > 0 and not future.cancelled():
                    self._changed.wait(delay)
                    continue
                self._queue.popleft()
                if future.set_running_or_notify_cancel():
                    return job, future

    def _serve(self) -> None:
        while True:
            job, future = self._next()
            try:
                future.set_result(job())
            except BaseException as err:  # surfaced by the Future, in the training thread
                future.set_exception(err)

    def finished(self) -> list[tuple[Path, Future[Path]]]:
        """The commits done since the last look, oldest first (and forgets them)."""
        done = [(p, f) for p, f in self._open if f.done()]
        self._open = [(p, f) for p, f in self._open if not f.done()]
        return done

    def drain(self) -> list[tuple[Path, Future[Path]]]:
        """Hurry and block until every submitted commit is done; return them, oldest first
        (and forget them)."""
        self.hurry()
        wait_futures([f for _, f in self._open])
        return self.finished()


SNAPSHOT_BYTES = 64 * 1024 * 1024  # up to this much CPU tensor data is cloned, not serialized


def small_on_cpu(state: Mapping[str, Any]) -> bool:
    """``state`` holds at most ``SNAPSHOT_BYTES`` of plain CPU tensors, and plain data."""
    import torch

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
    import torch

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


UNREADABLE = ("is corrupt", "is missing", "is unreadable", "has no known format")


def is_unreadable(err: UsageError) -> bool:
    """``err`` says a checkpoint's own files are damaged (not that it does not fit the model)."""
    return any(words in err.problem for words in UNREADABLE)


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
    import torch

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
