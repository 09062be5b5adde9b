"""Run every check on a run directory and gather the summary facts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from noderun.backends.slurm import SACCT_SUMMARY
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
