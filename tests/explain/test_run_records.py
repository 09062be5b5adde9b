"""What the run's own records prove comes first: a run stopped from outside is "interrupted"
(not a crash), a job whose output folder did not exist is said to be so."""

from __future__ import annotations

import json
from pathlib import Path

from noderun.backends import slurm
from noderun.backends.slurm_text import JobRecord
from noderun.explain import examine


def test_a_run_stopped_by_ctrl_c_is_interrupted_not_crashed(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "rank0.log").write_text(
        "epoch 1\nTraceback (most recent call last):\nKeyboardInterrupt\n"
    )
    (tmp_path / "run.json").write_text(
        json.dumps({"status": "interrupted", "exit_code": 130, "interrupted_by": "SIGINT"})
    )
    verdict = examine([str(tmp_path)])
    assert [f.cause for f in verdict.failures] == ["interrupted"]
    assert "SIGINT" in verdict.failures[0].summary


def test_a_job_without_its_output_folder_says_so(tmp_path: Path, monkeypatch) -> None:
    record = JobRecord(
        "77",
        {
            "JobState": "FAILED",
            "ExitCode": "1:0",
            "StdOut": f"{tmp_path}/logs/train-%j.out",
            "WorkDir": str(tmp_path),
        },
        "scontrol",
    )
    monkeypatch.setattr(slurm, "available", lambda: True)
    monkeypatch.setattr(slurm, "job_record", lambda job_id: record)
    verdict = examine(["77"])
    root = verdict.failures[0]
    assert root.cause == "storage-missing"
    assert f"{tmp_path}/logs/train-77.out" in root.summary and "does not exist" in root.summary
    assert f"mkdir -p {tmp_path}/logs" in root.fix
