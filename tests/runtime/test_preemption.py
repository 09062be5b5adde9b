"""Preemption: a signal sets a flag, every rank stops at the same step, saves, exits 75."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

import noderun
from noderun import checkpoint
from noderun.backends import requeue
from noderun.exit_codes import EXIT_PREEMPTED
from noderun.runtime import preemption as preemption_module
from noderun.runtime.preemption import Preemption, requeue_by_command, requeue_wanted
from tests.conftest import ROOT, start_noderun
from tests.runtime.test_resume import rank_process

SCRIPT = str(ROOT / "examples" / "traffic_regression.py")
TWO_NODES = ["run", "--nnodes", "2", "--nproc-per-node", "1"]
ARGS = ["--sensors", "2", "--days", "7", "--epochs", "3", "--batch-size", "64"]
EPOCH_2_STEP_6 = 33  # 27 steps per epoch on 2 ranks: this step() call is in epoch 2


@pytest.mark.parametrize("signum", [signal.SIGUSR1, signal.SIGTERM])
def test_signal_sets_flag_and_exit_is_75(tmp_path: Path, signum: signal.Signals) -> None:
    ctx = noderun.init(run_dir=tmp_path, environ={})
    before = signal.getsignal(signum)
    with Preemption(ctx, requeue=False) as preemption:
        assert signal.getsignal(signum) != before
        assert not preemption.should_stop()
        os.kill(os.getpid(), signum)  # the handler only sets the flag; the process goes on
        assert preemption.requested and preemption.received == signum.name
        assert preemption.should_stop()
        with pytest.raises(SystemExit) as stopped:
            preemption.exit("checkpoints/x")
        assert stopped.value.code == EXIT_PREEMPTED
    assert signal.getsignal(signum) == before  # handlers restored


def test_requeue_wanted() -> None:
    assert requeue_wanted({}, None) is False  # not a SLURM job
    assert requeue_wanted({"SLURM_JOB_ID": "7"}, False) is False
    assert requeue_wanted({}, True) is True
    assert requeue_wanted({"SLURM_JOB_ID": "7", "NODERUN_REQUEUE": "0"}, None) is False
    assert requeue_wanted({"SLURM_JOB_ID": "7", "NODERUN_REQUEUE": "1"}, None) is True
    assert requeue_wanted({"SLURM_JOB_ID": "7"}, None) is None  # if SLURM says requeueable


def _fake_scontrol(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, requeue_rc: int) -> Path:
    """An scontrol that logs its arguments, knows no job, and answers ``requeue`` with rc."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "scontrol.log"
    fake = bin_dir / "scontrol"
    fake.write_text(
        f'#!/bin/sh\necho "$*" >> {log}\n'
        'case "$1" in requeue) [ "$RC" = 0 ] || echo "Invalid job id specified" >&2; '
        'exit "$RC";; *) echo "Invalid job id specified" >&2; exit 1;; esac\n'
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("RC", str(requeue_rc))
    return log


def test_the_launchers_requeue_runs_in_its_own_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rank asks ``python -m noderun.backends.requeue`` (it imports no backend itself)."""
    assert preemption_module.NOT_REQUEUEABLE == requeue.NOT_REQUEUEABLE
    log = _fake_scontrol(tmp_path, monkeypatch, 0)
    assert requeue_by_command("7", True) == ""  # forced: requeued without asking
    assert requeue_by_command("8", False) is None  # SLURM knows no requeueable job 8
    assert log.read_text().splitlines()[0] == "requeue 7"
    assert "requeue 8" not in log.read_text()
    monkeypatch.setenv("RC", "1")
    assert requeue_by_command("9", True) == "Invalid job id specified"


def test_the_requeue_command_outlives_slurms_sigterm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A requeue makes SLURM SIGTERM the job's processes, the requeue command among them, right
    after scontrol answered: it must still say that the requeue was done (seen on the lab)."""
    _fake_scontrol(tmp_path, monkeypatch, 0)
    fake = tmp_path / "bin" / "scontrol"
    fake.write_text(fake.read_text().replace("requeue) ", "requeue) kill -TERM $PPID; sleep 0.2; "))
    assert requeue_by_command("7", True) == ""


def test_preemption_requeues_through_the_interface_it_is_given(tmp_path: Path) -> None:
    ctx = noderun.init(run_dir=tmp_path, environ={})
    asked: list[tuple[str, bool]] = []

    def requeuer(job: str, forced: bool) -> str | None:
        asked.append((job, forced))
        return None if job == "1" else ""

    for job, expected in (("1", False), ("2", True)):
        stop = Preemption(ctx, environ={"SLURM_JOB_ID": job}, requeuer=requeuer)
        assert stop._requeue() is expected
    assert asked == [("1", False), ("2", False)]
    never = Preemption(
        ctx, environ={"SLURM_JOB_ID": "3", "NODERUN_REQUEUE": "0"}, requeuer=requeuer
    )
    assert never._requeue() is False and len(asked) == 2


@pytest.mark.slow
def test_sigusr1_to_one_rank_stops_all_at_the_same_step(tmp_path: Path) -> None:
    """The real signal goes to rank 1 only; rank 0 learns it through the all-reduce."""
    run_dir = tmp_path / "run"
    proc = start_noderun(
        [*TWO_NODES, "--run-dir", str(run_dir), SCRIPT, *ARGS],
        NODERUN_DEBUG_WAIT_FOR_SIGNAL=f"1:{EPOCH_2_STEP_6}",  # rank 1 waits there for the signal
        NODERUN_PREEMPT_CHECK_SEC="0.01",  # agree within a few steps, still inside epoch 2
    )
    try:
        rank1 = rank_process(run_dir, 1)
        waiting = run_dir / "logs" / "rank1.waiting-for-signal"
        deadline = time.monotonic() + 180
        while not waiting.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert waiting.exists(), "rank 1 never reached epoch 2"
        sent = time.monotonic()
        os.kill(rank1.pid, signal.SIGUSR1)
        output, _ = proc.communicate(timeout=120)
        ended = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == EXIT_PREEMPTED, output[-3000:]
    assert ended < 90, f"stopping took {ended:.1f} s"  # inside a --signal=USR1@90 window
    assert "0:0| noderun: preempted by a signal to another rank; checkpoint" in output
    assert "job preempted: a checkpoint was saved" in output
    saved = checkpoint.latest(run_dir / "checkpoints")
    assert saved is not None and saved.name.startswith("epoch-0001-step-"), saved
    meta = json.loads((saved / "meta.json").read_text())
    assert meta["epoch"] == 1 and meta["step_in_epoch"] > 0 and meta["world_size"] == 2
    state = checkpoint.load(saved)
    assert len(state["rng"]) == 2 and len(state["extra"]) == 2  # both ranks contributed
    assert json.loads((run_dir / "run.json").read_text())["status"] == "preempted"


def test_an_array_task_requeues_itself_not_the_array() -> None:
    from noderun.runtime.preemption import requeue_target

    assert requeue_target({"SLURM_JOB_ID": "50"}) == "50"
    array = {"SLURM_JOB_ID": "50", "SLURM_ARRAY_JOB_ID": "50", "SLURM_ARRAY_TASK_ID": "2"}
    assert requeue_target(array) == "50_2"  # `scontrol requeue 50`: every task of array 50
