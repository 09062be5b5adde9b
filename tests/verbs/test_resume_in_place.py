"""A stopped run continues in place: the same command again, same --run-dir, --resume auto.
A completed run, or a live one, is refused in one line; every attempt stays in run.json."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from noderun import rundir
from noderun.errors import UsageError
from noderun.run_record import Follower, RunRecord
from tests.conftest import ROOT, cli, noderun

SCRIPT = str(ROOT / "examples" / "traffic_regression.py")
SMALL = ["--sensors", "2", "--days", "7"]  # 27 steps an epoch at 2 ranks x 64


def _record(run_dir: Path, **fields: object) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "run.json").write_text(json.dumps(fields))


@pytest.mark.parametrize("status", ["preempted", "failed", "interrupted", "stalled"])
def test_a_stopped_run_is_continued(tmp_path: Path, status: str) -> None:
    _record(tmp_path, status=status, exit_code=75)
    previous = rundir.reuse_or_refuse(tmp_path)
    assert previous is not None and previous.status == status
    merged = previous.continued_by(RunRecord(backend="local"))
    assert merged.status == "running" and merged.attempts == [previous]
    again = merged.continued_by(RunRecord(backend="local"))
    assert [a.status for a in again.attempts] == [status, "running"]
    rundir.write_record(tmp_path, again)  # what run.json holds: the format verify reads
    written = json.loads((tmp_path / "run.json").read_text())
    assert written["resumed_in_place"] is True
    assert [a["status"] for a in written["attempts"]] == [status, "running"]
    assert written["attempts"][0]["exit_code"] == 75 and "attempts" not in written["attempts"][0]


def test_a_completed_run_is_refused(tmp_path: Path) -> None:
    _record(tmp_path, status="completed")
    with pytest.raises(UsageError, match=r"holds a completed run.*noderun verify"):
        rundir.reuse_or_refuse(tmp_path)


def test_a_live_run_is_refused_and_a_stale_lock_is_not(tmp_path: Path) -> None:
    _record(tmp_path, status="running")
    rundir.take_lock(tmp_path)  # this process: alive
    with pytest.raises(UsageError, match=f"in use by a live noderun \\(pid {os.getpid()}"):
        rundir.reuse_or_refuse(tmp_path)
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()  # fmt: skip
    (tmp_path / rundir.LOCK).write_text(f"{gone} {os.uname().nodename}\n")
    assert rundir.reuse_or_refuse(tmp_path) is not None  # its owner is gone


def test_a_live_slurm_job_is_refused(tmp_path: Path) -> None:
    _record(tmp_path, status="running", job_id="42")
    with pytest.raises(UsageError, match="SLURM job 42, which has not ended"):
        rundir.reuse_or_refuse(tmp_path, job_alive=lambda job: job == "42")


def test_a_folder_with_other_files_is_refused(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(UsageError, match="not empty"):
        rundir.reuse_or_refuse(tmp_path)


@pytest.mark.slow
def test_preempted_then_the_same_command_again_completes_in_place(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    command = ["run", "--nnodes", "2", "--nproc-per-node", "1", "--run-dir", str(run_dir),
               SCRIPT, *SMALL, "--epochs", "2", "--batch-size", "64",
               "--resume", "auto"]  # fmt: skip
    first = noderun(  # a simulated SIGUSR1 on rank 0 at step 30 (epoch 2), agreed at once
        command, timeout=300, NODERUN_DEBUG_PREEMPT_AT="0:30", NODERUN_PREEMPT_CHECK_SEC="0.01"
    )
    assert first.returncode == 75, first.stdout[-2000:] + first.stderr[-2000:]
    assert "run the same command again (same --run-dir" in first.stderr
    assert "--resume auto" in first.stderr
    second = noderun(command, timeout=300)  # the hint, followed
    assert second.returncode == 0, second.stdout[-2000:] + second.stderr[-2000:]
    assert "continuing the preempted run" in second.stdout
    record = json.loads((run_dir / "run.json").read_text())
    assert record["status"] == "completed"
    assert [a["status"] for a in record["attempts"]] == ["preempted"]
    assert "resumed from" in (run_dir / "logs" / "rank0.log").read_text()
    rows = (run_dir / "metrics.csv").read_text().splitlines()
    assert [r.split(",")[0] for r in rows[1:]] == ["1", "2"]  # no epoch twice
    verified = cli(["verify", str(run_dir)])
    assert verified.returncode == 0, verified.stdout
    third = noderun(command, timeout=60)  # completed: refused, nothing touched
    assert third.returncode == 2 and "holds a completed run" in third.stderr


@pytest.mark.slow
def test_resuming_a_finished_run_carries_its_final_checkpoint_over(tmp_path: Path) -> None:
    args = ["run", "--nproc-per-node", "1"]
    train = [SCRIPT, *SMALL, "--epochs", "1", "--batch-size", "256"]
    done = noderun([*args, "--run-dir", str(tmp_path / "a"), *train], timeout=300)
    assert done.returncode == 0, done.stderr
    again = noderun(
        [*args, "--run-dir", str(tmp_path / "b"), *train, "--resume", str(tmp_path / "a")],
        timeout=300,
    )
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    final = sorted(p.name for p in (tmp_path / "a" / "checkpoints").iterdir())[-1]
    assert (tmp_path / "b" / "checkpoints" / final / ".complete").is_file()
    verified = cli(["verify", "--skip", "epochs", str(tmp_path / "b")])
    assert "checkpoint    PASS" in verified.stdout, verified.stdout


def test_attempt_lines_say_how_each_attempt_ended() -> None:
    first = {"status": "failed", "failure": {"rank": 1, "reason": "killed by SIGKILL"},
             "restart": "restarted the gang (restart 1 of 1)"}  # fmt: skip
    record = {"status": "completed", "attempts": [first]}
    assert rundir.attempt_lines(record) == [
        "attempt 1: failed: rank 1: killed by SIGKILL; restarted the gang (restart 1 of 1)",
        "attempt 2: completed",
    ]
    assert rundir.attempt_lines({"status": "completed"}) == []


def test_a_follower_is_known_gone_once_its_process_on_this_host_exited() -> None:
    """The launcher leaves the accounting to a `submit --wait` the record names, unless it is
    known to have died."""
    assert Follower.this_process().alive()
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()  # fmt: skip
    assert not Follower(os.uname().nodename, int(gone), 0.0).alive()
    assert Follower("another-host", int(gone), 0.0).alive()  # cannot be checked from here


def test_a_record_keeps_what_it_does_not_know(tmp_path: Path) -> None:
    _record(tmp_path, status="failed", backend="local", future_field={"x": 1}, topology="odd")
    record = rundir.read_record(tmp_path)
    assert record is not None and record.status == "failed" and record.topology is None
    rundir.write_record(tmp_path, record)
    written = json.loads((tmp_path / "run.json").read_text())
    assert written["future_field"] == {"x": 1} and written["topology"] == "odd"
