"""Run every check on a run directory and gather the summary facts."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from noderun.backends import slurm
from noderun.backends.slurm import SACCT_SUMMARY
from noderun.errors import UsageError
from noderun.explain.sources import run_dirs_of_job
from noderun.verify.evidence import RunEvidence, load_evidence, number, require_run_dir
from noderun.verify.model import Expectations, Report, Status, failed, skipped
from noderun.verify.run_checks import RUN_DIR_CHECKS
from noderun.verify.slurm_checks import (
    SLURM_CHECKS,
    is_slurm_run,
    job_id_of,
    job_nodes,
    summary_rows,
)

_JOB_ID = re.compile(r"^\d+(_\d+)?$")  # an array task: <array job>_<task>
_RUN_DIR_HINT = "pass a run directory (runs/<name>-…) or a SLURM job id"
_REQUIRE_FIX = "write it under the run directory (NODERUN_RUN_DIR), or drop it from --require"

# metrics.csv columns reported as "final <column>" when the last epoch has them
FINAL_COLUMNS = (
    "train_loss",
    "val_loss",
    "val_accuracy",
    "accuracy",
    "val_mae",
    "val_rmse",
    "throughput_samples_per_sec",
)


CHECK_NAMES = (*RUN_DIR_CHECKS, *SLURM_CHECKS)


def resolve_target(target: str) -> Path:
    """A run directory as given, or the run directory of a SLURM job id (its run.json names
    the job): searched beside the job's script and output, under ./runs and its workdir."""
    path = Path(target)
    if path.exists() or not _JOB_ID.match(target):
        return path
    if not slurm.available():
        raise UsageError(f"{target} does not exist (and SLURM is not installed)", _RUN_DIR_HINT)
    record = slurm.job_record(target)
    if record is None:
        raise UsageError(f"unknown SLURM job id {target}", "check it with `sacct -j ID`")
    target = record.array_task or target  # an array task's own id: run.json names <array>_<task>
    paths = [Path(p) for p in record.paths()]
    for candidate in paths:
        for folder in (candidate.parent, candidate.parent.parent):
            # the run directory itself, or (a sweep's array: its output is the sweep's) a point's
            for run_json in [folder / "run.json", *sorted(folder.glob("*/run.json"))]:
                if _names_job(run_json, target):
                    return run_json.parent
    for named in _named_run_dirs(paths):  # a user's own batch script: where noderun said
        if _names_job(named / "run.json", target):
            return named
    for root in [Path.cwd(), *(p for p in paths if p.is_dir())]:
        found = run_dirs_of_job(root, target)
        if found:
            return found[-1]
    raise UsageError(
        f"no run directory of job {target} found (searched its script, output and runs/)",
        "pass the run directory `noderun submit` printed",
    )


# noderun's banner and last line ("…, run dir /x/y" / "run dir /x/y (check it …)"), and a
# batch script's own option (`srun noderun run --run-dir /x/y …`)
_SAID_RUN_DIR = re.compile(r"(?:\brun dir |--run[-_]dir[= ])['\"]?(/[^\s'\";,()]+)")
_SCANNED = 1 << 20  # of each file: a banner is near the top of the job's output


def _names_job(run_json: Path, job: str) -> bool:
    try:
        return run_json.is_file() and f'"job_id": "{job}"' in run_json.read_text(errors="replace")
    except OSError:
        return False


def _named_run_dirs(paths: list[Path]) -> list[Path]:
    """Run directories the job's script and output name, in order, each once."""
    named: dict[Path, None] = {}
    for path in paths:
        try:
            with path.open(errors="replace") as f:
                text = f.read(_SCANNED)
        except OSError:  # a folder, gone, unreadable
            continue
        named.update((Path(m.group(1)), None) for m in _SAID_RUN_DIR.finditer(text))
    return list(named)


def verify_run_dir(target: Path, expect: Expectations | None = None) -> Report:
    """All checks of ``target``; raises UsageError when it is not a run directory at all."""
    expect = expect or Expectations()
    run_dir = require_run_dir(target)
    evidence = load_evidence(run_dir)
    report = Report(str(run_dir), facts=facts(evidence))
    checks = dict(RUN_DIR_CHECKS)
    if is_slurm_run(evidence):
        checks.update(SLURM_CHECKS)
        report.facts.update(slurm_facts(evidence))
    for name, check in checks.items():
        if name in expect.skip:
            report.add(skipped(name, "skipped (--skip)"))
            continue
        result = check(evidence, expect)
        if name in expect.require and result.status is Status.SKIP:
            result = failed(name, f"{result.detail} (--require {name})", _REQUIRE_FIX)
        report.add(result)
    report.failed_run = any(
        c.name in ("run-status", "job-state") and c.status is Status.FAIL for c in report.checks
    )
    return report


def facts(ev: RunEvidence) -> dict[str, Any]:
    """Nodes, ranks, backend, elapsed time, epochs and final metrics, where known."""
    run, runtime = ev.run_record, ev.runtime_record
    topology = run.get("topology") or {}
    out: dict[str, Any] = {
        "status": run.get("status"),
        "nodes": topology.get("nnodes"),
        "world_size": runtime.get("world_size", topology.get("world_size")),
        "backend": runtime.get("backend"),
        "hosts": sorted(set(runtime.get("rank_hosts") or run.get("hosts") or [])),
        "elapsed_sec": run.get("duration_sec"),
        "epochs_completed": ev.epochs_completed,
    }
    if ev.rows:
        last = ev.rows[-1]
        for column in FINAL_COLUMNS:
            value = number(last.get(column))
            if value is not None:
                out[f"final_{column}"] = value
    return {k: v for k, v in out.items() if v not in (None, [])}


def slurm_facts(ev: RunEvidence) -> dict[str, Any]:
    """Job id, and the job's state, nodes and elapsed time as sacct recorded them."""
    out: dict[str, Any] = {"slurm_job_id": job_id_of(ev)}
    rows = summary_rows(ev.run_dir / SACCT_SUMMARY)
    job = next((r for r in rows if r.get("JobID") == job_id_of(ev)), None)
    if job:
        out.update(
            {
                "slurm_state": job.get("State"),
                "slurm_nodes": job_nodes(rows, job),
                "slurm_elapsed": job.get("Elapsed"),
            }
        )
    return {k: v for k, v in out.items() if v}
