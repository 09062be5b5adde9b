"""``noderun explain JOB_ID`` on a job that is still running: is it hanging at start-up?"""

from __future__ import annotations

import re
import time
from pathlib import Path

from noderun.explain.findings import Finding
from noderun.explain.hang import hang_finding

_TAIL_BYTES = 1 << 20  # start-up lines are near the top; a long log is read from its start


def running_job_hangs(target: str, quiet_for: float) -> Finding | None:
    """The hang of running SLURM job ``target`` (a job id), or None (not a running job id)."""
    if not re.fullmatch(r"\d+(_\d+)?", target) or Path(target).exists():
        return None
    from noderun.backends.slurm import job_state

    try:
        state = job_state(target)
    except OSError:  # no SLURM client here: explain's usual path says so
        return None
    if state is None or state.status != "running" or not state.stdout:
        return None
    log = Path(state.stdout)
    try:
        with log.open("rb") as f:
            text = f.read(_TAIL_BYTES).decode("utf-8", "replace")
        quiet = time.time() - log.stat().st_mtime
    except OSError:
        return None
    return hang_finding(text, str(log), quiet, quiet_for)
