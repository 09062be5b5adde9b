"""`noderun ls / status / logs / cancel` of a submitted 2-node job on the Slurm lab: listed
running with its job id, its status (SLURM state and both ranks) as JSON, rank 1's lines by
job id (and those since a time, cut inside the log) and followed until the job ends; a
graceful cancel (`scancel --signal=USR1`) checkpoints every rank and ends the job CANCELLED
(as SLURM's accounting says too) without requeueing it, although it was submitted --requeue;
the same submit resumes it.
A torchrun-mode job: cancelled gracefully, resumed by a user's own batch script (`srun noderun
run`) and cancelled gracefully again, then resumed by the same submit and cancelled at once."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from noderun.backends.slurm import wait_for_job
from tests.conftest import ROOT, SCRIPTS, clean_env, cli, follow_logs, noderun, wait_until
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


def _iso(second: float) -> str:
    return datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%S")


def _sacct_state(job: str) -> str:
    """The job's state in SLURM's accounting (records reach slurmdbd a moment after the end)."""
    found = subprocess.run(["sacct", "-X", "-n", "-P", "-j", job, "-o", "State"],
                           capture_output=True, text=True, check=False).stdout  # fmt: skip
    return found.strip().split(" ")[0]


def _steps(text: str) -> list[int]:
    return [int(line.rsplit(" ", 1)[1]) for line in text.splitlines()]


def _followed_steps(lines: list[str]) -> list[int]:
    return [int(line.split()[-1]) for line in lines if line.startswith("rank 1 step ")]


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
    follow = None
    try:
        rank1 = run_dir / "logs" / "rank1.log"
        assert wait_until(lambda: "rank 1 step 3\n" in _text(rank1), 240), job
        mark = math.floor(time.time()) + 1  # steps 1-3 were written before it
        listed = cli(["ls", "--json", str(tmp_path / "runs")])
        runs = json.loads(listed.stdout)["runs"]
        assert [(r["status"], r["job_id"], r["backend"]) for r in runs] == [
            ("running", job, "slurm")
        ]
        status = cli(["status", "--json", job])
        seen = json.loads(status.stdout)
        assert seen["job"]["state"] == "RUNNING" and seen["job"]["nodes"], seen
        assert [r["rank"] for r in seen["ranks"]] == [0, 1] and seen["ranks"][1]["progress"]
        shown = cli(["logs", job, "--rank", "1", "--grep", "step [23]$"])
        assert shown.stdout.splitlines()[:2] == ["rank 1 step 2", "rank 1 step 3"], shown
        follow, followed, reader = follow_logs("--rank", "1", job)
        assert wait_until(lambda: max(_followed_steps(list(followed)), default=0) > 3, 60), followed
        assert wait_until(lambda: os.stat(rank1).st_mtime > mark + 0.5, 30)
        recent = cli(["logs", job, "--rank", "1", "--since", _iso(mark)])
        assert recent.returncode == 0 and _steps(recent.stdout), recent.stdout + recent.stderr
        assert min(_steps(recent.stdout)) > 3, recent.stdout  # cut inside the log

        cancelled = cli(["cancel", job])
        assert cancelled.returncode == 0, cancelled.stdout + cancelled.stderr
        assert "every rank saved a checkpoint" in cancelled.stdout, cancelled.stdout
        final = wait_for_job(job, poll=0.5, max_poll=0.5)
        assert follow.wait(timeout=60) == 0  # -f ends with the job
        reader.join(timeout=5)
    finally:
        subprocess.run(["scancel", job], capture_output=True, check=False)
        if follow is not None and follow.poll() is None:
            follow.kill()
    steps = _followed_steps(followed)
    assert steps == sorted(steps) and len(steps) == len(set(steps)), followed  # once, in order
    assert final.state == "CANCELLED", final  # as run.json says, not FAILED
    assert wait_until(lambda: _sacct_state(job) == "CANCELLED", 30), _sacct_state(job)
    shown_job = subprocess.run(
        ["scontrol", "show", "job", "-o", job], capture_output=True, text=True, check=False
    ).stdout
    assert "Restarts=0" in shown_job or not shown_job, shown_job  # not requeued
    assert read_json(run_dir / "run.json")["status"] == "cancelled"
    assert "preempted by `noderun cancel`" in _text(run_dir / "logs" / "rank0.log")
    again = cli(["cancel", job])
    assert again.returncode == 2 and "already ended (cancelled)" in again.stderr, again.stderr

    resumed = noderun([*command[:1], "--wait", *command[1:]], cwd=ROOT, timeout=300,
                      PACED_STEP_SEC="0")  # fmt: skip
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-2000:]
    record = read_json(run_dir / "run.json")
    assert record["status"] == "completed", record
    assert "cancelled" in [a["status"] for a in record["attempts"]], record["attempts"]
    assert "noderun: resumed from" in _text(run_dir / "logs" / "rank0.log")


def test_a_torchrun_mode_job_cancelled_gracefully_resumed_then_cancelled_at_once(
    tmp_path: Path,
) -> None:
    """A torchrun-mode job (SIGUSR1 reaches the ranks through their torchrun agents): `cancel
    JOB` checkpoints every rank and the job ends CANCELLED. A user's own batch script whose
    `srun noderun run` resumes it is cancelled gracefully the same way: run.json `cancelled`
    (not `preempted`), the job CANCELLED, the script's later lines not run. The same submit
    resumes it again; `cancel --now` of that job scancels it at once, no checkpoint asked for:
    it ends CANCELLED, run.json `cancelled` (written by cancel when SLURM killed the launcher
    first), and a second cancel is refused in one line."""
    require_lab()
    run_dir = tmp_path / "runs" / "paced-torchrun"
    command = ["submit", "--nodes", "2", "--nproc-per-node", "1", "--time", "10"]
    command += ["--run-dir", str(run_dir), PACED, "--resume", "auto", "--max-steps", "600"]
    rank0, rank1 = run_dir / "logs" / "rank0.log", run_dir / "logs" / "rank1.log"
    jobs = []
    try:
        submitted = noderun(command, cwd=ROOT, PACED_STEP_SEC="0.1")
        assert submitted.returncode == 0, submitted.stdout + submitted.stderr
        jobs.append(job := job_id_of(submitted.stdout))
        assert wait_until(lambda: "rank 1 step 2\n" in _text(rank1), 240), job
        cancelled = cli(["cancel", job])
        assert cancelled.returncode == 0, cancelled.stdout + cancelled.stderr
        assert "every rank saved a checkpoint" in cancelled.stdout, cancelled.stdout
        assert wait_for_job(job, poll=0.5, max_poll=0.5).state == "CANCELLED"
        assert read_json(run_dir / "run.json")["status"] == "cancelled"
        assert "preempted by `noderun cancel`" in _text(rank0)

        # the user's own sbatch: each task one node of `srun noderun run`, resuming that run
        user = tmp_path / "user.sbatch"
        user.write_text(
            "#!/bin/bash\n#SBATCH --nodes=2 --ntasks-per-node=1 --cpus-per-task=2 --time=10\n"
            f"#SBATCH --output={tmp_path / 'user.out'}\ncd {ROOT}\n"
            f"srun {Path(sys.executable).parent / 'noderun'} run --run-dir {run_dir} {PACED} "
            "--resume auto --max-steps 600\necho AFTER THE STEP\n"
        )
        resumes = _text(rank0).count("noderun: resumed from")
        done = subprocess.run(["sbatch", "--parsable", str(user)], capture_output=True,
                              text=True, env=clean_env(PACED_STEP_SEC="0.1"))  # fmt: skip
        assert done.returncode == 0, done.stderr
        jobs.append(job := done.stdout.strip().split(";")[0])
        assert wait_until(lambda: _text(rank0).count("noderun: resumed from") > resumes, 240)
        cancelled = cli(["cancel", job])
        assert cancelled.returncode == 0, cancelled.stdout + cancelled.stderr
        assert "every rank saved a checkpoint" in cancelled.stdout, cancelled.stdout
        assert wait_for_job(job, poll=0.5, max_poll=0.5).state == "CANCELLED"
        record = read_json(run_dir / "run.json")
        assert record["status"] == "cancelled" and record["launch"] == "srun noderun run", record
        assert "AFTER THE STEP" not in _text(tmp_path / "user.out")

        resumes = _text(rank0).count("noderun: resumed from")
        resubmitted = noderun(command, cwd=ROOT, PACED_STEP_SEC="0.1")
        assert resubmitted.returncode == 0, resubmitted.stdout + resubmitted.stderr
        jobs.append(job := job_id_of(resubmitted.stdout))
        assert wait_until(lambda: _text(rank0).count("noderun: resumed from") > resumes, 240)
        cancelled = cli(["cancel", "--now", job])
        assert cancelled.returncode == 0, cancelled.stdout + cancelled.stderr
        assert "stopped at once" in cancelled.stdout, cancelled.stdout
        final = wait_for_job(job, poll=0.5, max_poll=0.5)
    finally:
        for started in jobs:
            subprocess.run(["scancel", started], capture_output=True, check=False)
    assert final.final and final.state == "CANCELLED", final
    record = read_json(run_dir / "run.json")
    assert record["status"] == "cancelled" and record["mode"] == "torchrun", record
    assert "cancelled" in [a["status"] for a in record["attempts"]], record["attempts"]
    assert "rank 1 step 600" not in _text(rank1)  # stopped, not finished
    again = cli(["cancel", "--now", job])
    assert again.returncode == 2 and "already ended (cancelled)" in again.stderr, again.stderr
