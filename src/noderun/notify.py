"""``--notify CMD``: tell the user a run ended, failed, was preempted or stalled.

Each target is a shell command, run with the run's summary as JSON on its standard input
(``--notify 'mail -s noderun me@example.org'``, ``--notify 'curl -d @- ntfy.sh/mine'``), or an
apprise URL (``slack://…``, ``ntfy://…``) when the ``notify`` extra is installed. A target that
fails is a warning on stderr: a notification never changes how the run ended.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from pathlib import Path
from typing import Any

from noderun.run_record import RunRecord

# run.json's status -> the event the notification is about
EVENTS = {
    "completed": "end",
    "failed": "failure",
    "preempted": "preemption",
    "stalled": "stall",
    "interrupted": "end",
}
TIMEOUT_SEC = 30.0
# the launcher's --notify targets (JSON), for the requeue command a preempted rank runs: a
# requeued job's launcher is stopped by SLURM before it could tell
TARGETS_ENV = "NODERUN_NOTIFY_TARGETS"
_URL = re.compile(r"[a-z][a-z0-9+.-]*://", re.IGNORECASE)
NO_APPRISE = "needs the notify extra (pip install 'noderun[notify]')"


def summary(run_dir: Path, record: RunRecord, **extra: Any) -> dict[str, Any]:
    """The JSON a notify command reads: event, status, run dir, job, exit code, duration,
    the first failure, the stall report, the last row of metrics.csv."""
    from noderun.sweep.runner import final_metrics

    failure = record.failure
    return {
        "event": EVENTS.get(record.status, "end"),
        "status": record.status,
        "run_dir": str(run_dir.absolute()),
        "backend": record.backend,
        "job_id": record.job_id,
        "host": socket.gethostname(),
        "exit_code": record.exit_code,
        "duration_sec": record.duration_sec,
        "failure": failure.reason if failure else None,
        "stall": record.stall,
        "command": record.command,
        "metrics": final_metrics(run_dir),
        **extra,
    }


def send(
    targets: Sequence[str],
    payload: Mapping[str, Any],
    warn: Callable[[str], None] | None = None,
) -> int:
    """Send ``payload`` to every target; the number that failed (each one warned about)."""
    warn = warn or (lambda line: print(line, file=sys.stderr, flush=True))
    text = json.dumps(payload, indent=1, default=str) + "\n"
    failed = 0
    for target in targets:
        problem = _apprise(target, payload) if _URL.match(target) else _command(target, text)
        if problem:
            failed += 1
            warn(f"noderun: warning: --notify {target!r} failed: {problem}; the run is unaffected")
    return failed


def _command(command: str, text: str) -> str:
    try:
        done = subprocess.run(
            command, shell=True, input=text, text=True, capture_output=True, timeout=TIMEOUT_SEC
        )
    except subprocess.TimeoutExpired:
        return f"still running after {TIMEOUT_SEC:.0f} s, stopped"
    except OSError as err:
        return str(err)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [""])[-1]
        return f"exit {done.returncode}" + (f": {last}" if last else "")
    return ""


def _apprise(url: str, payload: Mapping[str, Any]) -> str:
    try:
        import apprise  # type: ignore[import-not-found]
    except ImportError:
        return f"an apprise URL {NO_APPRISE}"
    sender = apprise.Apprise()
    if not sender.add(url):
        return "apprise does not understand this URL"
    title = f"noderun: {payload.get('event', 'end')}: {payload.get('run_dir', '')}"
    body = json.dumps(payload, indent=1, default=str)
    return "" if sender.notify(title=title, body=body) else "apprise could not deliver it"


def export_targets(targets: Sequence[str], environ: MutableMapping[str, str]) -> None:
    """Hand the targets to the ranks (and so to the requeue command they run)."""
    if targets:
        environ[TARGETS_ENV] = json.dumps(list(targets))


def _exported(environ: Mapping[str, str]) -> list[str]:
    try:
        return [str(t) for t in json.loads(environ.get(TARGETS_ENV) or "[]")]
    except (ValueError, TypeError):
        return []


def notify_stall(
    run_dir: Path, report: str, job_id: str | None, environ: Mapping[str, str]
) -> threading.Thread | None:
    """A stall the job keeps waiting through (--on-stall report): ``stall`` to the exported
    targets, from a thread of its own (the watch goes on); None when there are none."""
    targets = _exported(environ)
    if not targets:
        return None
    from noderun.sweep.runner import final_metrics

    payload = {
        "event": "stall",
        "status": "running",
        "run_dir": str(run_dir.absolute()),
        "job_id": job_id,
        "host": socket.gethostname(),
        "stall": report,
        "metrics": final_metrics(run_dir),
    }
    thread = threading.Thread(target=send, args=(targets, payload), daemon=True)
    thread.start()
    return thread


def notify_requeued(job: str, environ: Mapping[str, str]) -> None:
    """After ``scontrol requeue``: a ``preemption`` to the targets the launcher exported."""
    targets = _exported(environ)
    if not targets:
        return
    from noderun.sweep.runner import final_metrics

    run_dir = environ.get("NODERUN__RUN_DIR") or environ.get("NODERUN_RUN_DIR") or ""
    send(targets, {
        "event": "preemption",
        "status": "requeued",
        "run_dir": run_dir,
        "backend": "slurm",
        "job_id": job,
        "host": socket.gethostname(),
        "restart_count": int(environ.get("SLURM_RESTART_COUNT", "0") or 0),
        "metrics": final_metrics(Path(run_dir)) if run_dir else {},
    })  # fmt: skip


def notify_run(targets: Sequence[str], run_dir: Path) -> None:
    """At the end of a run: its summary (from run.json) to every target, if any."""
    if not targets:
        return
    from noderun import rundir

    try:
        record = rundir.read_record(run_dir)
    except (OSError, ValueError):
        record = None
    if record is not None:
        send(targets, summary(run_dir, record))
