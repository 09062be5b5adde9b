"""Where a job's time goes: stage timestamps from every process, gathered into run.json.

Each process that takes part in a run (the submit verb, the launcher, every node entry,
every rank) appends one line per stage to ``RUN_DIR/logs/timeline.jsonl``::

    {"stage": "node_entered", "t": 1795512345.123, "who": "node1"}

Lines are short single ``write``s with O_APPEND, so processes on one filesystem do not
interleave them. ``gather`` folds them into the ``timeline`` of run.json: per stage, the
first and last time and how many processes reached it, in the order the stages happened.
``rank_entry.py`` writes the same line format itself (it imports nothing of noderun).
Standard library only; stamping never raises: a timeline is not worth a failed run.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import time
from pathlib import Path
from typing import Any

FILE = "timeline.jsonl"

# the stages in the order a job goes through them (others sort by time after these)
STAGES = (
    "submit_started",
    "submitted",
    "job_running_seen",
    "launcher_started",
    "step_started",
    "node_entered",
    "gate_passed",
    "store_hosted",
    "rank_started",
    "process_group_up",
    "metrics_started",  # the run writes metrics.csv (verify: missing is then a FAIL)
    "checkpointer_ready",  # the run writes checkpoints (verify: none is then a FAIL)
    "rank_exited",
    "step_ended",
    "teardown_done",
    "job_end_seen",
    "accounting_written",
)


def path(run_dir: str | os.PathLike[str]) -> Path:
    return Path(run_dir) / "logs" / FILE


@functools.cache
def process_start() -> float:
    """When this process started (epoch seconds): its interpreter start-up and imports are
    part of the launch. Linux /proc; elsewhere, now."""
    try:
        with open("/proc/self/stat") as handle:
            ticks = int(handle.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as handle:
            uptime = float(handle.read().split()[0])
        return time.time() - max(uptime - ticks / os.sysconf("SC_CLK_TCK"), 0.0)
    except (OSError, ValueError, IndexError):
        return time.time()


def stamp(
    run_dir: str | os.PathLike[str] | None, stage: str, who: str = "", at: float | None = None
) -> None:
    """Append ``stage`` reached by ``who`` now (or ``at``), best effort."""
    if not run_dir:
        return
    when = time.time() if at is None else at
    line = json.dumps({"stage": stage, "t": when, "who": who or f"pid{os.getpid()}"})
    with contextlib.suppress(OSError):
        target = path(run_dir)
        target.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (line + "\n").encode())
        finally:
            os.close(fd)


def gather(run_dir: str | os.PathLike[str], since: float = 0.0) -> list[dict[str, Any]]:
    """Per stage reached at or after ``since``: first, last, count; in job order."""
    seen: dict[str, dict[str, Any]] = {}
    try:
        lines = path(run_dir).read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        try:
            entry = json.loads(line)
            stage, at = str(entry["stage"]), float(entry["t"])
        except (ValueError, KeyError, TypeError):
            continue  # a line cut short by a killed process
        if at < since:
            continue  # an earlier attempt's
        row = seen.setdefault(stage, {"stage": stage, "first": at, "last": at, "count": 0})
        row["first"], row["last"] = min(row["first"], at), max(row["last"], at)
        row["count"] += 1
    order = {name: i for i, name in enumerate(STAGES)}
    return sorted(seen.values(), key=lambda r: (order.get(r["stage"], len(order)), r["first"]))


def table(rows: list[dict[str, Any]]) -> list[str]:
    """Human lines: seconds since the first stage, for the first and the last process."""
    if not rows:
        return ["no timeline recorded (runs of noderun before 0.2 do not have one)"]
    origin = min(r["first"] for r in rows)
    lines = [f"{'stage':<20} {'first':>8} {'last':>8}  count"]
    for r in rows:
        last = f"{r['last'] - origin:8.3f}" if r["count"] > 1 else f"{'':8}"
        lines.append(f"{r['stage']:<20} {r['first'] - origin:8.3f} {last}  {r['count']}")
    return lines
