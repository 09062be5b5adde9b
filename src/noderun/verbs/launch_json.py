"""``--json`` of ``run`` and ``submit``: one object at the end, from the run directory's record.

{"schema": 1, "verb": "submit", "job_id": "4711", "run_dir": "/shared/runs/train-…",
 "status": "submitted", "exit_code": 0}
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from noderun import rundir
from noderun.verbs.options import switch

JSON_OPTION = switch(
    "--json",
    help="print one JSON object at the end on stdout (schema, job id, run dir, status, exit "
    "code); everything else, the ranks' lines too, goes to stderr",
)


def launch_result(args: argparse.Namespace, code: int, error: str | None = None) -> dict[str, Any]:
    """What a launch verb did: its job id (SLURM), run directory, status and exit code."""
    run_dir = getattr(args, "run_dir", None)
    record: dict[str, Any] = {}
    if run_dir is not None and (Path(run_dir) / rundir.RUN_JSON).is_file():
        try:
            record = rundir.read_json(Path(run_dir) / rundir.RUN_JSON)
        except (OSError, ValueError):
            record = {}
    job_id = getattr(args, "job_id", None) or record.get("job_id")
    if error is not None:
        status = "error"
    elif getattr(args, "dry_run", False):
        status = "dry-run"
    else:
        status = str(record.get("status") or ("completed" if code == 0 else "failed"))
    result: dict[str, Any] = {
        "verb": args.verb,
        "job_id": str(job_id) if job_id else None,
        "run_dir": str(Path(run_dir).resolve()) if run_dir is not None else None,
        "status": status,
        "exit_code": code,
    }
    if error is not None:
        result["error"] = error
    return result
