"""`noderun ls / status / logs / cancel` of a submitted 2-node job on the Slurm lab: listed
running with its job id, its status (SLURM state and both ranks) as JSON, rank 1's lines by
job id; a graceful cancel (`scancel --signal=USR1`) checkpoints every rank and ends the job
without requeueing it, although it was submitted --requeue; the same submit resumes it."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from noderun.backends.slurm import wait_for_job
from tests.conftest import ROOT, SCRIPTS, noderun, wait_until
from tests.slurm.lab import job_id_of, read_json, require_lab

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

PACED = str(SCRIPTS / "paced_trainer.py")
SUBMIT = ["submit", "--nodes", "2", "--nproc-per-node", "1", "--mode", "srun", "--requeue"]
SUBMIT += ["--time", "10"]


def _text(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def test_a_submitted_job_listed_shown_cancelled_with_a_checkpoint_and_resumed(
    tmp_path: Path,
) -> None:
    require_lab()
    run_dir = tmp_path / "runs" / "paced"
    command = [*SUBMIT, "--run-dir", str(run_dir), PACED, "--resume", "auto"]
    command += ["--max-steps", "600"]  # 60 s at 0.1 s a step: cancelled long before its end
    submitted = noderun(command, cwd=ROOT, PACED_STEP_SEC="0.1")  # sbatch exports it
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr
    job = job_id_of(submitted.stdout)
    try:
        rank1 = run_dir / "logs" / "rank1.log"
        assert wait_until(lambda: "rank 1 step 3\n" in _text(rank1), 240), job
        listed = noderun(["ls", "--json", str(tmp_path / "runs")])
        runs = json.loads(listed.stdout)["runs"]
        assert [(r["status"], r["job_id"], r["backend"]) for r in runs] == [
            ("running", job, "slurm")
        ]
        status = noderun(["status", "--json", job])
        seen = json.loads(status.stdout)
        assert seen["job"]["state"] == "RUNNING" and seen["job"]["nodes"], seen
        assert [r["rank"] for r in seen["ranks"]] == [0, 1] and seen["ranks"][1]["progress"]
        shown = noderun(["logs", job, "--rank", "1", "--grep", "step [23]$"])
        assert shown.stdout.splitlines()[:2] == ["rank 1 step 2", "rank 1 step 3"], shown

        cancelled = noderun(["cancel", job], timeout=240)
        assert cancelled.returncode == 0, cancelled.stdout + cancelled.stderr
        assert "every rank saved a checkpoint" in cancelled.stdout, cancelled.stdout
        final = wait_for_job(job, poll=0.5, max_poll=0.5)
    finally:
        subprocess.run(["scancel", job], capture_output=True, check=False)
    assert final.final and final.status != "completed", final
    shown_job = subprocess.run(
        ["scontrol", "show", "job", "-o", job], capture_output=True, text=True, check=False
    ).stdout
    assert "Restarts=0" in shown_job or not shown_job, shown_job  # not requeued
    assert read_json(run_dir / "run.json")["status"] == "cancelled"
    assert "preempted by `noderun cancel`" in _text(run_dir / "logs" / "rank0.log")
    again = noderun(["cancel", job])
    assert again.returncode == 2 and "already ended (cancelled)" in again.stderr, again.stderr

    resumed = noderun([*command[:1], "--wait", *command[1:]], cwd=ROOT, timeout=300,
                      PACED_STEP_SEC="0")  # fmt: skip
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-2000:]
    record = read_json(run_dir / "run.json")
    assert record["status"] == "completed", record
    assert "cancelled" in [a["status"] for a in record["attempts"]], record["attempts"]
    assert "noderun: resumed from" in _text(run_dir / "logs" / "rank0.log")


def test_a_torchrun_mode_job_cancelled_at_once_ends_cancelled_with_nothing_left(
    tmp_path: Path,
) -> None:
    """`cancel --now JOB` of a torchrun-mode job: scancel at once, no checkpoint asked for; the
    job ends CANCELLED, run.json `cancelled` (written by cancel when SLURM killed the launcher
    first), and a second cancel is refused in one line."""
    require_lab()
    run_dir = tmp_path / "runs" / "paced-now"
    command = ["submit", "--nodes", "2", "--nproc-per-node", "1", "--time", "10"]
    command += ["--run-dir", str(run_dir), PACED, "--max-steps", "600"]
    submitted = noderun(command, cwd=ROOT, PACED_STEP_SEC="0.1")
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr
    job = job_id_of(submitted.stdout)
    try:
        rank1 = run_dir / "logs" / "rank1.log"
        assert wait_until(lambda: "rank 1 step 2\n" in _text(rank1), 240), job
        cancelled = noderun(["cancel", "--now", job], timeout=120)
        assert cancelled.returncode == 0, cancelled.stdout + cancelled.stderr
        assert "stopped at once" in cancelled.stdout, cancelled.stdout
        final = wait_for_job(job, poll=0.5, max_poll=0.5)
    finally:
        subprocess.run(["scancel", job], capture_output=True, check=False)
    assert final.final and final.state == "CANCELLED", final
    record = read_json(run_dir / "run.json")
    assert record["status"] == "cancelled" and record["mode"] == "torchrun", record
    assert "rank 1 step 600" not in _text(rank1)  # stopped, not finished
    again = noderun(["cancel", "--now", job])
    assert again.returncode == 2 and "already ended (cancelled)" in again.stderr, again.stderr
