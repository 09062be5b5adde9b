"""verify of a SLURM job noderun did not start: judged from SLURM's record, its steps and its
own output file (SLURM's answers faked here; the lab test asks the real one)."""

from __future__ import annotations

from pathlib import Path

import pytest

from noderun.backends.slurm_text import JobRecord
from noderun.verify import plain_job
from noderun.verify.model import Expectations

STEPS = [
    {"JobID": "74", "State": "FAILED", "ExitCode": "1:0", "NodeList": "node[1-2]"},
    {"JobID": "74.batch", "State": "FAILED", "ExitCode": "1:0", "NodeList": "node1"},
    {"JobID": "74.0", "State": "FAILED", "ExitCode": "1:0", "NodeList": "node[1-2]"},
]


def _record(out: Path, state: str, exit_code: str) -> JobRecord:
    fields = {"JobState": state, "ExitCode": exit_code, "NodeList": "node[1-2]",
              "StdOut": str(out), "WorkDir": str(out.parent)}  # fmt: skip
    return JobRecord("74", fields, "scontrol")


def _statuses(report: plain_job.Report) -> dict[str, str]:
    return {c.name: c.status.value for c in report.checks}


def test_a_failed_plain_job_names_its_state_step_and_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "job-74.out"
    out.write_text("world 2 rank 1\n[rank1]: RuntimeError: rank 1 hit a bad batch\n")
    monkeypatch.setattr(plain_job, "_steps", lambda job_id, final: STEPS)
    report = plain_job.verify_job(_record(out, "FAILED", "1:0"), Expectations())
    assert _statuses(report) == {
        "job-state": "FAIL", "steps": "FAIL", "output-files": "PASS", "world-size": "SKIP",
        "rank-logs": "FAIL",
    }  # fmt: skip
    steps = next(c for c in report.checks if c.name == "steps")
    assert "step 74.0 FAILED" in steps.detail
    assert not report.healthy and report.failed_run


def test_a_completed_plain_job_without_a_step_is_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "job-74.out"
    out.write_text("All distributed processes registered. Starting with 4 processes\n")
    rows = [{"JobID": "74", "State": "COMPLETED"}, {"JobID": "74.batch", "State": "COMPLETED"}]
    monkeypatch.setattr(plain_job, "_steps", lambda job_id, final: rows)
    report = plain_job.verify_job(_record(out, "COMPLETED", "0:0"), Expectations(world_size=8))
    statuses = _statuses(report)
    assert statuses["job-state"] == "PASS" and statuses["steps"] == "WARN"
    assert statuses["world-size"] == "FAIL"  # 4 registered, 8 asked
    out.unlink()
    report = plain_job.verify_job(_record(out, "COMPLETED", "0:0"), Expectations())
    assert _statuses(report)["output-files"] == "FAIL"
