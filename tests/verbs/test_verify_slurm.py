"""`noderun verify` of runs submitted to the Slurm lab: sacct summary, job state, JOB_ID input."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from noderun import cli
from tests.conftest import SCRIPTS, noderun
from tests.slurm.lab import job_nodes, require_lab

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

TRAINER = str(SCRIPTS / "tiny_trainer.py")


@pytest.fixture(scope="module")
def jobs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, Path]]:
    """A healthy 2-node job and one whose rank 1 crashes, submitted with `noderun submit`."""
    require_lab()
    root = tmp_path_factory.mktemp("verify-slurm")
    out = {}
    for name, extra in (("ok", []), ("crash", ["--crash-rank", "1", "--crash-epoch", "2"])):
        run_dir = root / name
        done = noderun(
            ["submit", "--nodes", "2", "--run-dir", str(run_dir), "--wait", TRAINER, *extra],
            timeout=240,
        )
        assert (done.returncode == 0) == (name == "ok"), done.stdout + done.stderr
        record = json.loads((run_dir / "run.json").read_text())
        out[name] = (str(record["job_id"]), run_dir)
    return out


def report(target: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict]:
    code = cli.main(["verify", target, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_healthy_job_by_run_dir_and_by_job_id(jobs, capsys):
    job, run_dir = jobs["ok"]
    code, by_dir = report(str(run_dir), capsys)
    assert code == 0, by_dir["checks"]
    checks = {c["check"]: c for c in by_dir["checks"]}
    assert checks["job-state"]["status"] == "PASS" and "COMPLETED" in checks["job-state"]["detail"]
    assert checks["sacct-summary"]["status"] == "PASS"
    listed, hosts = job_nodes(job)  # whichever two the shared lab gave it
    assert checks["ddp-init"]["detail"].endswith(", ".join(hosts))
    assert by_dir["facts"]["slurm_state"] == "COMPLETED"
    assert by_dir["facts"]["slurm_nodes"] == listed
    code, by_id = report(job, capsys)
    assert code == 0 and by_id["run"] == str(run_dir)


def test_failed_job_fails_and_points_to_explain(jobs, capsys):
    job, _ = jobs["crash"]
    code, result = report(job, capsys)
    assert code == 1
    checks = {c["check"]: c for c in result["checks"]}
    assert checks["job-state"]["status"] == "FAIL"
    assert f"noderun explain {job}" in checks["job-state"]["fix"]
    assert checks["run-status"]["status"] == "FAIL" and "rank 1" in checks["run-status"]["detail"]


def test_missing_sacct_summary_fails(jobs, tmp_path, capsys):
    copy = tmp_path / "run"
    shutil.copytree(jobs["ok"][1], copy)
    (copy / "sacct_summary.txt").unlink()
    code, result = report(str(copy), capsys)
    assert code == 1
    assert {c["check"]: c["status"] for c in result["checks"]}["sacct-summary"] == "FAIL"


def test_unknown_job_id_is_one_line_exit_2(capsys):
    assert cli.main(["verify", "987654321"]) == 2
    assert "unknown SLURM job id 987654321" in capsys.readouterr().err


def test_summary_of_a_job_holds_its_accounting(jobs):
    job, run_dir = jobs["ok"]
    assert cli.main(["verify", str(run_dir), "--summary"]) == 0
    summary = (run_dir / "EXECUTION_SUMMARY.md").read_text()
    assert "## SLURM accounting" in summary
    for line in (run_dir / "sacct_summary.txt").read_text().strip().splitlines():
        assert line in summary
    assert f"| job id | {job} |" in summary
    assert "| rank | node | host |" in summary and job_nodes(job)[1][1] in summary
