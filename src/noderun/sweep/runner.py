"""Run a sweep's points on this machine, at most P at once, and judge each one.

One mechanism for ``noderun sweep`` and ``noderun scale``: a point is a ``noderun run`` (or
``submit --wait``) command with its own run directory and console log; the runner starts them,
and ``judge`` reads what each left behind (run.json, verify's verdict, explain's cause) in this
process, without starting ``noderun verify`` or ``noderun explain``.
"""

from __future__ import annotations

import concurrent.futures
import csv
import dataclasses
import subprocess
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from noderun import rundir
from noderun.errors import NoderunError
from noderun.run_record import RunRecord

TIMED_OUT = -1
STOP_GRACE_SEC = 30.0  # a stopped point's launcher stops its ranks within this
# a point whose run.json says this is done; every other state is run (again) by a re-run
DONE = ("completed",)


@dataclasses.dataclass(frozen=True)
class PointJob:
    """One point's command: ``argv`` writes into ``run_dir``, its console goes to ``log``."""

    name: str
    argv: tuple[str, ...]
    run_dir: Path
    log: Path
    env: Mapping[str, str] | None = None


@dataclasses.dataclass(frozen=True)
class Judgement:
    """What a point's run directory says: run.json's status, verify's verdict, the cause."""

    status: str  # run.json's status, "timed out", or "not run"
    healthy: bool
    verdict: str  # "healthy", "unhealthy" or "" (nothing to verify)
    finding: str  # explain's root cause when the point failed or is unhealthy
    wall_sec: float | None = None


def already_done(run_dir: Path) -> bool:
    """The resume choice: a point whose run completed is skipped by a re-run of the sweep;
    a failed, preempted, interrupted, stalled or never-started point is run again (a stopped
    run continues in place, so a script given ``--resume auto`` picks up its checkpoint)."""
    record = point_record(run_dir)
    return record is not None and record.status in DONE


def run_jobs(
    jobs: Sequence[PointJob],
    max_parallel: int,
    timeout: float | None = None,
    on_start: Callable[[PointJob], None] = lambda job: None,
    on_done: Callable[[PointJob, int], None] = lambda job, code: None,
) -> dict[str, int]:
    """Run every job, at most ``max_parallel`` at once; name -> exit code (TIMED_OUT).
    Ctrl-C: no new point starts; the running ones get the signal from the terminal and
    end as interrupted (a re-run continues them)."""
    lock = threading.Lock()
    codes: dict[str, int] = {}

    def one(job: PointJob) -> None:
        with lock:
            on_start(job)
        code = _run(job, timeout)
        with lock:
            codes[job.name] = code
            on_done(job, code)

    pool = concurrent.futures.ThreadPoolExecutor(max_workers=max(1, max_parallel))
    try:
        futures = [pool.submit(one, job) for job in jobs]
        for future in futures:
            future.result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return codes


def _run(job: PointJob, timeout: float | None) -> int:
    job.log.parent.mkdir(parents=True, exist_ok=True)
    with job.log.open("w") as log:
        proc = subprocess.Popen(job.argv, stdout=log, stderr=subprocess.STDOUT, env=job.env)
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            # SIGTERM first: the point's launcher stops its ranks and writes run.json (a
            # SIGKILL would leave its ranks behind)
            proc.terminate()
            _wait_or_kill(proc)
            return TIMED_OUT
        except BaseException:  # Ctrl-C: the terminal signalled the point too; let it end
            _wait_or_kill(proc)
            raise


def _wait_or_kill(proc: subprocess.Popen[bytes]) -> None:
    """Give a stopping point STOP_GRACE_SEC to end, then SIGKILL it."""
    try:
        proc.wait(timeout=STOP_GRACE_SEC)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def judge(run_dir: Path, log: Path, code: int | None) -> Judgement:
    """Read a point's run directory: healthy when it exited 0 (``code``; None: not known, as
    for a job array's task) and verify passes; else explain's root cause, one line."""
    record = point_record(run_dir)
    status = record.status if record is not None else ("timed out" if code == TIMED_OUT else "")
    wall = record.duration_sec if record is not None else None
    verdict, healthy = "", False
    if record is not None:
        healthy = _verified(run_dir)
        verdict = "healthy" if healthy else "unhealthy"
    ok = healthy and (code == 0 if code is not None else status == "completed")
    finding = "" if ok else cause(run_dir, log, code)
    return Judgement(status or "not run", ok, verdict, finding, wall)


def cause(run_dir: Path, log: Path, code: int | None) -> str:
    """explain's root cause, 'cause: summary (evidence)', or what is known without one."""
    if code == TIMED_OUT:
        return "timed out (--point-timeout)"
    from noderun.explain import examine

    target = run_dir if run_dir.is_dir() else log
    try:
        failures = examine([str(target)]).failures
    except (NoderunError, OSError):
        failures = []
    if failures:
        first = failures[0]
        evidence = first.evidence.text.strip()
        return f"{first.cause}: {first.summary}" + (f" ({evidence})" if evidence else "")
    exited = f"exit {code}; " if code is not None else ""
    return f"{exited}not healthy (see `noderun verify {run_dir}`)"


def _verified(run_dir: Path) -> bool:
    from noderun.verify import verify_run_dir

    try:
        return verify_run_dir(run_dir).healthy
    except (NoderunError, OSError, ValueError):
        return False


def point_record(run_dir: Path) -> RunRecord | None:
    """A point's run.json, None when it has none or it cannot be read."""
    try:
        return rundir.read_record(run_dir)
    except (OSError, ValueError):
        return None


def final_metrics(run_dir: Path) -> dict[str, str]:
    """The last row of the point's metrics.csv, its empty columns left out."""
    rows = metric_rows(run_dir)
    return {k: v for k, v in rows[-1].items() if k and v not in (None, "")} if rows else {}


def metric_rows(run_dir: Path) -> list[dict[str, str]]:
    try:
        with (run_dir / "metrics.csv").open() as f:
            return list(csv.DictReader(f))
    except OSError:
        return []
