"""Run every check on a run directory and gather the summary facts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from noderun.verify.evidence import RunEvidence, load_evidence, number, require_run_dir
from noderun.verify.model import Expectations, Report, Status, skipped
from noderun.verify.run_checks import RUN_DIR_CHECKS

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


def verify_run_dir(target: Path, expect: Expectations | None = None) -> Report:
    """All checks of ``target``; raises UsageError when it is not a run directory at all."""
    expect = expect or Expectations()
    run_dir = require_run_dir(target)
    evidence = load_evidence(run_dir)
    report = Report(str(run_dir), facts=facts(evidence))
    for name, check in RUN_DIR_CHECKS.items():
        if name in expect.skip:
            report.add(skipped(name, "skipped (--skip)"))
        else:
            report.add(check(evidence, expect))
    report.failed_run = any(
        c.name == "run-status" and c.status is Status.FAIL for c in report.checks
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
        "epochs_completed": len(ev.rows),
    }
    if ev.rows:
        last = ev.rows[-1]
        for column in FINAL_COLUMNS:
            value = number(last.get(column))
            if value is not None:
                out[f"final_{column}"] = value
    return {k: v for k, v in out.items() if v not in (None, [])}
