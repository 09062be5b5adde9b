"""`noderun verify|explain|status|cancel JOB`: the run directory of a SLURM job id, found from
what SLURM knows of the job (its script, output files, working directory)."""

from __future__ import annotations

import json
import types
from pathlib import Path

import pytest

from noderun.errors import UsageError
from noderun.verify import target as verifier


def _job(monkeypatch: pytest.MonkeyPatch, *paths: Path) -> None:
    record = types.SimpleNamespace(array_task=None, paths=lambda: [str(p) for p in paths])
    monkeypatch.setattr(verifier.slurm, "available", lambda: True)
    monkeypatch.setattr(verifier.slurm, "job_record", lambda job: record)


def _run(run_dir: Path, job: str) -> Path:
    run_dir.mkdir(parents=True)
    (run_dir / "run.json").write_text(json.dumps({"job_id": job, "status": "cancelled"}))
    return run_dir


def test_a_users_batch_script_run_dir_is_found_from_what_noderun_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run dir lies two levels below the script (no run.json beside it, nor in runs/):
    noderun's banner in the job's output names it; a run dir of another job it names is not
    taken."""
    other = _run(tmp_path / "deep" / "runs" / "old", "51")
    mine = _run(tmp_path / "deep" / "runs" / "mine", "52")
    script, out = tmp_path / "user.sbatch", tmp_path / "user.out"
    script.write_text(f"#!/bin/bash\nsrun noderun run --run-dir {other} train.py\n")
    out.write_text(
        "noderun: SLURM step 52.0: 2 node(s) x 1 = 2 ranks (torchrun mode) on node1, node2; "
        f"run dir {mine}\n"
    )
    _job(monkeypatch, script, out, tmp_path)
    assert verifier.resolve_target("52") == mine
    script.write_text(f"#!/bin/bash\nsrun noderun run --run_dir='{mine}' train.py\n")
    _job(monkeypatch, script, tmp_path)  # no output file (yet): the script's own option
    assert verifier.resolve_target("52") == mine


def test_a_job_whose_files_name_no_run_of_it_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = _run(tmp_path / "runs" / "old", "51")
    (out := tmp_path / "user.out").write_text(f"run dir {other}\n")
    _job(monkeypatch, out, tmp_path / "gone.sbatch")
    monkeypatch.chdir(tmp_path / "runs")
    with pytest.raises(UsageError, match="no run directory of job 52 found"):
        verifier.resolve_target("52")
