"""What `noderun ls`, `status`, `logs` and `cancel` say about a run, decided without I/O.

The verbs gather the facts (run.json, the launcher's lock, SLURM's state, the files under
logs/); here they become one status word, table rows and JSON, and ``--since`` becomes a
time. Pure: values in, values out.
"""

from __future__ import annotations

import dataclasses
import datetime
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

# a run still going (or about to): what `cancel` may stop, what `logs -f` follows
LIVE = ("running", "stalled", "pending", "submitted")
# launcher: "alive" (its lock is held), "dead" (a stale lock: it died), "gone" (no lock)
LAUNCHER_DEAD = "dead"


def run_status(
    recorded: str, launcher: str = "gone", job: str | None = None, stalled: bool = False
) -> str:
    """The status `ls` shows: run.json's ``recorded`` status corrected by what is known now.

    ``job``: SLURM's view of the run's job (``slurm_text.state_status``), None when not SLURM
    or unknown. A run.json that still says running whose launcher died says so; a job that
    ended without its launcher writing run.json takes SLURM's word.

    >>> run_status("running", launcher="dead")
    'launcher died'
    >>> run_status("submitted", job="pending")
    'pending'
    """
    if recorded not in ("running", "submitted"):
        if recorded == "preempted" and job in ("pending", "running"):
            return "requeued"  # the job came back, its launcher has not started yet
        return recorded or "unknown"
    if job is not None and job not in ("pending", "running", "unknown"):
        return job  # scancel, a time limit, a lost node: run.json was never finished
    if job == "pending":
        return "pending"
    if launcher == LAUNCHER_DEAD and job is None:
        return "launcher died"
    if recorded == "submitted" and job != "running":
        return "submitted"
    return "stalled" if stalled else "running"


def is_stalled(stall_report_at: float | None, last_activity: float | None) -> bool:
    """A stall report (``stall-<time>.txt``) written after the last sign of life."""
    if stall_report_at is None:
        return False
    return last_activity is None or stall_report_at >= last_activity


def duration_text(seconds: float | None) -> str:
    """``3725`` -> ``1h02m``, ``185`` -> ``3m05s``, ``12.4`` -> ``12s``; None -> ``-``."""
    if seconds is None or seconds < 0:
        return "-"
    whole = int(seconds)
    if whole >= 86400:
        return f"{whole // 86400}d{whole % 86400 // 3600:02d}h"
    if whole >= 3600:
        return f"{whole // 3600}h{whole % 3600 // 60:02d}m"
    if whole >= 60:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole}s"


def parse_iso(text: str | None) -> float | None:
    """An ISO time of run.json (``2026-11-26T03:50:11+00:00``) as epoch seconds."""
    if not text:
        return None
    try:
        when = datetime.datetime.fromisoformat(text)
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    return when.timestamp()


def started_text(epoch: float | None) -> str:
    """``2026-11-26 03:50`` (UTC) or ``-``."""
    if epoch is None:
        return "-"
    return datetime.datetime.fromtimestamp(epoch, datetime.UTC).strftime("%Y-%m-%d %H:%M")


_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)([smhd])")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_since(text: str, now: float) -> float:
    """``--since``: a duration back from ``now`` (``90s``, ``10m``, ``1h30m``, ``2d``) or an
    ISO time (``2026-11-26T03:00``, UTC unless it names a zone); epoch seconds. ValueError
    (with what is accepted) otherwise.

    >>> parse_since("1h30m", now=10000.0)
    4600.0
    """
    spec = text.strip().lower()
    if spec and _DURATION_PART.sub("", spec) == "" and _DURATION_PART.search(spec):
        total = sum(float(n) * _UNIT[u] for n, u in _DURATION_PART.findall(spec))
        return now - total
    when = parse_iso(text.strip().replace(" ", "T", 1))
    if when is None:
        raise ValueError(
            f"--since {text!r} is neither a duration (90s, 10m, 1h30m, 2d) nor a time "
            "(2026-11-26T03:00, UTC)"
        )
    return when


# a time at the start of a log line: 2026-11-26 03:50:11[,.]123 or 2026-11-26T03:50:11
_LINE_TIME = re.compile(r"^\[?(\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2})")


def line_time(line: str) -> float | None:
    """The time a log line starts with (logging's and ISO formats), None when it has none."""
    found = _LINE_TIME.match(line)
    return parse_iso(found.group(1).replace(" ", "T")) if found else None


def lines_since(lines: Iterable[str], since: float) -> list[str]:
    """The lines from the first one stamped at or after ``since``; every line when none has
    a time of its own (the file as a whole was written since then)."""
    lines = list(lines)
    stamped = False
    for index, line in enumerate(lines):
        when = line_time(line)
        if when is None:
            continue
        stamped = True
        if when >= since:
            return lines[index:]
    return [] if stamped else lines


def metric_text(row: Mapping[str, str] | None, limit: int = 3) -> str:
    """metrics.csv's last row in a few words: ``epoch 3 train_loss 0.0123 val_loss 0.02``."""
    if not row:
        return "-"
    words = []
    for key in ("epoch", "step", "global_step"):
        if row.get(key):
            words.append(f"{key} {row[key]}")
            break
    shown = 0
    for key, value in row.items():
        if shown >= limit or key in ("epoch", "step", "global_step") or not value:
            continue
        if "loss" in key or "acc" in key or key.startswith("val_"):
            words.append(f"{key} {_number(value)}")
            shown += 1
    return " ".join(words) or "-"


def _number(text: str) -> str:
    try:
        return f"{float(text):.4g}"
    except ValueError:
        return text


@dataclasses.dataclass(frozen=True)
class RunLine:
    """One run as `noderun ls` lists it."""

    run_dir: str
    name: str
    backend: str
    nodes: int | None
    nproc_per_node: int | None
    status: str
    started: float | None  # epoch seconds
    duration: float | None
    last_metrics: dict[str, str] | None
    job_id: str | None

    @property
    def shape(self) -> str:
        if self.nodes is None or self.nproc_per_node is None:
            return "-"
        return f"{self.nodes}x{self.nproc_per_node}"

    def row(self) -> tuple[str, ...]:
        return (
            self.name,
            self.backend or "-",
            self.shape,
            self.status,
            started_text(self.started),
            duration_text(self.duration),
            metric_text(self.last_metrics),
            self.job_id or "-",
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "run_dir": self.run_dir,
            "name": self.name,
            "backend": self.backend,
            "nodes": self.nodes,
            "nproc_per_node": self.nproc_per_node,
            "status": self.status,
            "started": self.started,
            "duration_sec": None if self.duration is None else round(self.duration, 3),
            "last_metrics": self.last_metrics,
            "job_id": self.job_id,
        }


LS_COLUMNS = ("run", "backend", "nodes", "status", "started", "duration", "last metrics", "job")


def newest_first(lines: Iterable[RunLine]) -> list[RunLine]:
    return sorted(lines, key=lambda line: (line.started or 0.0, line.name), reverse=True)


def run_duration(
    start: float | None, end: float | None, recorded: float | None, now: float, live: bool
) -> float | None:
    """Seconds the run took (its recorded duration once ended) or has been going."""
    if not live and recorded is not None:
        return recorded
    if start is None:
        return None
    return (now if live else (end or now)) - start


@dataclasses.dataclass(frozen=True)
class RankLine:
    """One rank as `noderun status` shows it."""

    rank: int
    host: str
    # signs of progress noderun's runtime counted in this attempt (steps, collectives, metric
    # rows: logs/rank<R>.progress, what the stall watch reads); None: a script without it
    progress: int | None
    per_sec: float | None
    last_line_age: float | None  # seconds since its log last grew (None: no log yet)
    stalled: bool
    # TrainingLoop's global step (and epoch; None in step mode) and the rank's own steps per
    # second over this attempt; None: no TrainingLoop step yet, or a script without one
    step: int | None = None
    epoch: int | None = None
    steps_per_sec: float | None = None

    def row(self) -> tuple[str, ...]:
        where = "-" if self.step is None else str(self.step)
        if self.epoch is not None:
            where += f" (epoch {self.epoch})"
        return (
            str(self.rank),
            self.host or "-",
            where,
            "-" if self.steps_per_sec is None else f"{self.steps_per_sec:.2f}",
            "-" if self.progress is None else str(self.progress),
            "-" if self.per_sec is None else f"{self.per_sec:.2f}",
            duration_text(self.last_line_age) + (" ago" if self.last_line_age is not None else ""),
            "STALLED" if self.stalled else "no",
        )

    def to_json(self) -> dict[str, Any]:
        rate = None if self.per_sec is None else round(self.per_sec, 3)
        age = None if self.last_line_age is None else round(self.last_line_age, 3)
        return {
            "rank": self.rank,
            "host": self.host,
            "step": self.step,
            "epoch": self.epoch,
            "steps_per_sec": None if self.steps_per_sec is None else round(self.steps_per_sec, 3),
            "progress": self.progress,
            "progress_per_sec": rate,
            "last_line_age_sec": age,
            "stalled": self.stalled,
        }


RANK_COLUMNS = (
    "rank",
    "host",
    "step",
    "steps/s",
    "progress",
    "progress/s",
    "last line",
    "stalled",
)


def rank_rate(step: int | None, since: float | None, at: float) -> float | None:
    """Progress per second of one rank over ``since``..``at`` (None when unknown)."""
    if step is None or since is None or at <= since:
        return None
    return step / (at - since)


def rate_between(
    before: tuple[float, int | None] | None, after: tuple[float, int | None]
) -> float | None:
    """Progress per second between two samples (time, count) of `status --watch`."""
    if before is None or before[1] is None or after[1] is None or after[0] <= before[0]:
        return None
    if after[1] < before[1]:
        return None  # a new attempt counts from 0 again
    return (after[1] - before[1]) / (after[0] - before[0])


def rank_host(rank: int, rank_hosts: Sequence[str], hosts: Sequence[str], nproc: int) -> str:
    """Where ``rank`` runs: runtime.json's ``rank_hosts``, else run.json's node ``hosts``."""
    if rank < len(rank_hosts):
        return rank_hosts[rank]
    node = rank // max(nproc, 1)
    return hosts[node] if node < len(hosts) else ""


def node_ranks(node: int, nproc: int) -> range:
    """The global ranks of node ``node`` (``--node``)."""
    return range(node * nproc, (node + 1) * nproc)
