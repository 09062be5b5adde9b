"""The run directory: run.json, runtime.json, metrics.csv, logs/, checkpoints/ (DESIGN.md)."""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import json
import os
import secrets
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from noderun import atomic
from noderun.errors import UsageError
from noderun.run_record import RunRecord, pid_alive

RUN_JSON = "run.json"
RUNTIME_JSON = "runtime.json"
METRICS_CSV = "metrics.csv"
LOGS = "logs"
CHECKPOINTS = "checkpoints"


def new_run_dir(script: str, root: Path = Path("runs")) -> Path:
    """``runs/<script>-<date>-<time>-<4 hex>``: unique even for two runs in the same second."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return root / f"{Path(script).stem}-{stamp}-{secrets.token_hex(2)}"


def now_iso() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    """Write JSON to a temporary name, fsync, rename: readers never see half a file."""
    atomic.write_text(path, json.dumps(data, indent=2, default=str) + "\n")


def read_json(path: Path) -> dict[str, Any]:
    with open(path) as handle:
        data = json.load(handle)
    if not isinstance(data, dict):
        raise ValueError(f"{path} does not hold a JSON object")
    return data


def read_record(run_dir: Path) -> RunRecord | None:
    """The run's record (run.json), None when there is none yet."""
    path = run_dir / RUN_JSON
    return RunRecord.from_json(read_json(path)) if path.exists() else None


def write_record(run_dir: Path, record: RunRecord) -> None:
    """run.json, whole and at once: the record's only writer."""
    write_json_atomic(run_dir / RUN_JSON, record.to_json())


RESUMABLE = ("preempted", "cancelled", "failed", "interrupted", "stalled", "running")
LOCK = ".noderun.lock"


def reuse_or_refuse(
    run_dir: Path, job_alive: Callable[[str], bool] | None = None
) -> RunRecord | None:
    """The record of a stopped run to continue in place, None for a new run dir, or a
    UsageError: a completed run is never overwritten, a live one never joined (a local run
    holds the lock; a SLURM run is alive while ``job_alive(job_id)`` says so)."""
    record_path = run_dir / RUN_JSON
    if not record_path.exists():
        if run_dir.is_dir() and any(run_dir.iterdir()):
            raise UsageError(f"run directory {run_dir} is not empty", "pass a new --run-dir")
        return None
    owner = lock_owner(run_dir)
    if owner:
        raise UsageError(
            f"run directory {run_dir} is in use by a live noderun ({owner})",
            "wait for it to end, stop it, or pass another --run-dir",
        )
    record = RunRecord.from_json(read_json(record_path))
    job = str(record.job_id or "")
    if job and job_alive is not None and job_alive(job):
        raise UsageError(
            f"run directory {run_dir} belongs to SLURM job {job}, which has not ended",
            f"wait for it (`noderun submit` --wait follows it), or `scancel {job}`",
        )
    status = record.status
    if status == "completed":
        raise UsageError(
            f"run directory {run_dir} holds a completed run",
            f"check it with `noderun verify {run_dir}`, or pass a new --run-dir",
        )
    if status not in RESUMABLE:
        raise UsageError(
            f"run directory {run_dir} holds a run noderun cannot continue (status {status!r})",
            "pass a new --run-dir",
        )
    return record


def attempt_lines(record: dict[str, Any]) -> list[str]:
    """One line per attempt of a run, oldest first, saying how each ended and what followed
    ([] for a run that had one attempt)::

        attempt 1: failed: rank 1 …: killed by SIGKILL; restarted the gang (restart 1 of 2)
        attempt 2: completed
    """
    attempts = list(record.get("attempts") or [])
    if not attempts:
        return []
    lines = []
    for number, attempt in enumerate([*attempts, record], start=1):
        failure = attempt.get("failure") or {}
        who = f"rank {failure['rank']}: " if failure.get("rank") is not None else ""
        why = f": {who}{failure['reason']}" if failure.get("reason") else ""
        then = f"; {attempt['restart']}" if attempt.get("restart") else ""
        lines.append(f"attempt {number}: {attempt.get('status', 'unknown')}{why}{then}")
    return lines


def lock_holder(run_dir: Path) -> tuple[int, str] | None:
    """(pid, host) the lock file names, alive or not; None without a lock file."""
    return _lock_text(run_dir)


def _lock_text(run_dir: Path) -> tuple[int, str] | None:
    try:
        pid_text, _, host = (run_dir / LOCK).read_text().partition(" ")
        return int(pid_text), host.strip()
    except (OSError, ValueError):
        return None


def _held(run_dir: Path) -> bool:
    """Some process holds the lock file's flock (it dies with its holder, even SIGKILLed)."""
    try:
        fd = os.open(run_dir / LOCK, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)
    return False


def lock_owner(run_dir: Path) -> str | None:
    """Who holds the run dir's lock ("pid 12 on host"), or None (no lock, or a stale one)."""
    found = _lock_text(run_dir)
    if found is None:
        return None
    pid, host = found
    if host != socket.gethostname():
        return f"pid {pid} on {host}"  # cannot check another host: assume alive
    return f"pid {pid} on {host}" if _alive(run_dir, pid) else None


def _alive(run_dir: Path, pid: int) -> bool:
    """The lock's process lives and holds it (a reused pid holds no flock)."""
    return pid_alive(pid) and _held(run_dir)


def stale_lock(run_dir: Path) -> str | None:
    """ "the launcher (pid 12 on host) died: stale lock …" when the run dir's lock was left by a
    noderun of this host that is gone (killed before it could finish run.json), else None."""
    found = _lock_text(run_dir)
    if found is None or found[1] != socket.gethostname() or _alive(run_dir, found[0]):
        return None
    return (
        f"the launcher (pid {found[0]} on {found[1]}) died without finishing run.json "
        f"(stale lock {run_dir / LOCK})"
    )


_held_locks: dict[Path, int] = {}  # run dir -> the open lock file whose flock this process holds


def take_lock(run_dir: Path) -> None:
    """Mark the run dir as in use by this process (a stale lock is replaced); a UsageError when
    another live noderun holds it, so of two started at once exactly one runs."""
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / LOCK
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            owner = lock_owner(run_dir) or "another noderun"
            raise UsageError(
                f"run directory {run_dir} is in use by a live noderun ({owner})",
                "wait for it to end, stop it, or pass another --run-dir",
            ) from None
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except OSError:
            same = False
        if same:  # not a file its last holder unlinked while we waited for it
            break
        os.close(fd)
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()} {socket.gethostname()}\n".encode())
    _held_locks[run_dir] = fd


def release_lock(run_dir: Path) -> None:
    with contextlib.suppress(OSError):
        (run_dir / LOCK).unlink()
    fd = _held_locks.pop(run_dir, None)
    if fd is not None:
        os.close(fd)
