"""What `ls`, `status`, `logs` and `cancel` read about a run: its record, its launcher's lock,
its SLURM job, its stall reports, metrics and rank files. ``run_view`` decides from them."""

from __future__ import annotations

import dataclasses
import os
import re
import time
from pathlib import Path
from typing import Any

from noderun import run_view, rundir
from noderun.backends.slurm_text import JOB_ID
from noderun.errors import UsageError
from noderun.run_record import RunRecord
from noderun.stacks.files import progress_file, read_progress_and_position

_RANK_LOG = re.compile(r"^rank(\d+)\.log$")


def resolve(target: str) -> Path:
    """``RUN|JOB``: a run directory, or the run directory of a SLURM job id (``4711``, an array
    task's ``4711_2``: verify's lookup); a one-line UsageError when it is neither."""
    run_dir = Path(target)
    if not run_dir.exists() and JOB_ID.match(target):
        from noderun.verify.target import resolve_target

        run_dir = resolve_target(target)
    if not run_dir.exists():
        raise UsageError(
            f"{target} does not exist", "pass a run directory (`noderun ls` lists them) or a job id"
        )
    if not (run_dir / rundir.RUN_JSON).is_file():
        raise UsageError(
            f"{target} is not a run directory (no run.json)",
            "pass a directory `noderun run` or `noderun submit` printed (`noderun ls` lists them)",
        )
    return run_dir


def read(run_dir: Path) -> RunRecord:
    """run.json, or a one-line UsageError when it cannot be read."""
    try:
        record = rundir.read_record(run_dir)
    except (OSError, ValueError) as err:
        raise UsageError(
            f"{run_dir / rundir.RUN_JSON} cannot be read ({err})", "pass another run directory"
        ) from None
    if record is None:
        raise UsageError(f"{run_dir} is not a run directory (no run.json)", "pass another one")
    return record


@dataclasses.dataclass
class Observed:
    """One look at a run."""

    run_dir: Path
    record: RunRecord
    launcher: str  # run_view's "alive", "dead", "gone"
    job: Any  # slurm.JobRecord, or None (not SLURM, or SLURM not asked)
    stall_at: float | None
    last_row: dict[str, str] | None
    rank_hosts: list[str]
    at: float

    @property
    def job_status(self) -> str | None:
        return self.job.state.status if self.job is not None else None

    def job_json(self) -> dict[str, Any] | None:
        """The SLURM job: id, state, elapsed time and nodes, as SLURM says."""
        if not self.record.job_id:
            return None
        fields = self.job.fields if self.job is not None else {}
        return {
            "id": self.record.job_id,
            "state": self.job.state.state if self.job is not None else None,
            "elapsed": fields.get("RunTime") or fields.get("Elapsed"),
            "nodes": fields.get("NodeList") or None,
        }

    @property
    def last_activity(self) -> float | None:
        times = [t for t in (_mtime(p) for p in self.log_files().values()) if t is not None]
        times.append(_mtime(self.run_dir / rundir.METRICS_CSV) or 0.0)
        return max(times) or None

    @property
    def status(self) -> str:
        stalled = run_view.is_stalled(self.stall_at, self.last_activity)
        return run_view.run_status(self.record.status, self.launcher, self.job_status, stalled)

    @property
    def world_size(self) -> int:
        shape = self.record.topology
        return shape.world_size if shape else len(self.log_files())

    @property
    def nproc_per_node(self) -> int:
        shape = self.record.topology
        return shape.nproc_per_node if shape else 1

    def log_files(self) -> dict[int, Path]:
        """rank -> logs/rank<R>.log, for the ranks that wrote one."""
        found = {}
        logs = self.run_dir / rundir.LOGS
        for path in logs.glob("rank*.log") if logs.is_dir() else ():
            if matched := _RANK_LOG.match(path.name):
                found[int(matched.group(1))] = path
        return dict(sorted(found.items()))

    def attempt_start(self) -> float | None:
        record = self.record
        return run_view.parse_iso(record.start_time or record.submit_time)

    def line(self) -> run_view.RunLine:
        record = self.record
        start = run_view.parse_iso(record.start_time or record.submit_time)
        first = record.attempts[0] if record.attempts else record
        started = run_view.parse_iso(first.start_time or first.submit_time) or start
        status = self.status
        live = status in run_view.LIVE
        end = run_view.parse_iso(record.end_time)
        total = run_view.run_duration(start, end, record.duration_sec, self.at, live)
        earlier = [a.duration_sec for a in record.attempts]
        if total is not None and all(d is not None for d in earlier):
            total += sum(d for d in earlier if d is not None)  # every attempt's time
        shape = record.topology
        return run_view.RunLine(
            run_dir=str(self.run_dir),
            name=self.run_dir.name,
            backend=record.backend,
            nodes=shape.nnodes if shape else None,
            nproc_per_node=shape.nproc_per_node if shape else None,
            status=status,
            started=started,
            duration=total,
            last_metrics=self.last_row,
            job_id=record.job_id,
        )

    def ranks(
        self, steps: dict[int, tuple[float, int | None]] | None = None
    ) -> list[run_view.RankLine]:
        """Every rank's line; ``steps``: an earlier sample (time, step) per rank for the rate
        between them (`--watch`), else the rate over the attempt."""
        logs = self.log_files()
        live = self.status in run_view.LIVE
        end = self.at if live else (run_view.parse_iso(self.record.end_time) or self.at)
        hosts = self.record.hosts or []
        lines = []
        for rank in range(self.world_size):
            step, position = read_progress_and_position(progress_file(self.run_dir, rank))
            seen = _mtime(logs[rank]) if rank in logs else None
            if steps is not None:
                rate = run_view.rate_between(steps.get(rank), (self.at, step))
            else:
                rate = run_view.rank_rate(step, self.attempt_start(), end)
            lines.append(
                run_view.RankLine(
                    rank=rank,
                    host=run_view.rank_host(rank, self.rank_hosts, hosts, self.nproc_per_node),
                    progress=step,
                    step=None if position is None else position.step,
                    epoch=None if position is None else position.epoch,
                    steps_per_sec=None if position is None else position.steps_per_sec,
                    per_sec=rate,
                    last_line_age=None if seen is None else max(self.at - seen, 0.0),
                    stalled=live
                    and self.stall_at is not None
                    and run_view.is_stalled(self.stall_at, seen),
                )
            )
        return lines


def observe(run_dir: Path, ask_slurm: bool = True) -> Observed:
    """Look at ``run_dir`` now (SLURM is asked about a job only while it may still run)."""
    record = read(run_dir)
    if rundir.lock_owner(run_dir):
        launcher = "alive"
    elif rundir.stale_lock(run_dir):
        launcher = run_view.LAUNCHER_DEAD
    else:
        launcher = "gone"
    job = None
    if ask_slurm and record.job_id and (not record.ended or record.status == "preempted"):
        from noderun.backends import slurm

        if slurm.available():
            job = slurm.job_record(record.job_id)
    runtime = _json(run_dir / rundir.RUNTIME_JSON)
    hosts = runtime.get("rank_hosts")
    return Observed(
        run_dir=run_dir,
        record=record,
        launcher=launcher,
        job=job,
        stall_at=max((t for p in run_dir.glob("stall-*.txt") if (t := _mtime(p))), default=None),
        last_row=_last_row(run_dir / rundir.METRICS_CSV),
        rank_hosts=[str(h) for h in hosts] if isinstance(hosts, list) else [],
        at=time.time(),
    )


def runs_under(root: Path) -> list[Path]:
    """Run directories in ``root`` (itself, its children, their children: sweeps)."""
    if (root / rundir.RUN_JSON).is_file():
        return [root]
    found = []
    for child in sorted(root.iterdir()) if root.is_dir() else ():
        if (child / rundir.RUN_JSON).is_file():
            found.append(child)
        elif child.is_dir() and child.name not in (rundir.LOGS, rundir.CHECKPOINTS):
            found += [g for g in sorted(child.iterdir()) if (g / rundir.RUN_JSON).is_file()]
    return found


def _mtime(path: Path) -> float | None:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return None


def _json(path: Path) -> dict[str, Any]:
    try:
        return rundir.read_json(path)
    except (OSError, ValueError):
        return {}


def _last_row(path: Path) -> dict[str, str] | None:
    """metrics.csv's header and last row (read from the end: the file may be long)."""
    try:
        with open(path, "rb") as handle:
            header = handle.readline().decode(errors="replace").strip()
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(size - 8192, 0))
            tail = handle.read().decode(errors="replace").splitlines()
    except OSError:
        return None
    rows = [line for line in tail if line.strip() and line.strip() != header]
    if not header or not rows:
        return None
    import csv

    names = next(csv.reader([header]))
    values = next(csv.reader([rows[-1]]))
    return dict(zip(names, values, strict=False))
