"""Preemption, resume, verify and explain of `noderun run --hosts` runs on the SSH lab, as
they work locally: SIGUSR1 to a rank on the second host checkpoints every rank (exit 75,
status preempted); the same command again continues in place and verifies HEALTHY; explain
of a run whose remote rank was killed names the host and the rank."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from noderun import checkpoint
from noderun.exit_codes import EXIT_PREEMPTED
from tests.conftest import ROOT, cli, noderun, processes_of_run, processes_running, start_noderun
from tests.ssh.lab import SshLab

pytestmark = [pytest.mark.slow, pytest.mark.ssh]
CLASSIFIER = str(ROOT / "examples" / "ddp_classifier.py")
# 1437 training digits, 16 per rank per step, 2 ranks: 45 steps per epoch; call 50 is epoch 2
EPOCH_2_STEP_5 = 50


def _rank_process(run_dir: Path, rank: int, script: str) -> psutil.Process:
    """The worker of ``rank`` of the run in ``run_dir`` (every lab host shares this machine's
    process table: only the hostname is the host's own)."""
    for proc in processes_running(script):
        try:
            env = proc.environ()
        except psutil.Error:
            continue
        if "torch.distributed.run" in " ".join(proc.cmdline()):
            continue
        if env.get("NODERUN__RUN_DIR") == str(run_dir) and env.get("RANK") == str(rank):
            return proc
    raise AssertionError(f"no process of rank {rank} for {run_dir}")


def _wait_for(path: Path, proc: subprocess.Popen[str], limit: float = 180) -> None:
    deadline = time.monotonic() + limit
    while not path.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    if not path.exists():
        output = proc.stdout.read() if proc.poll() is not None and proc.stdout else ""
        raise AssertionError(f"{path.name} never appeared: {output[-2000:]}")


def test_usr1_to_a_remote_rank_preempts_then_the_same_command_resumes_healthy(
    ssh_lab: SshLab, tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    command = [
        "run", "--hosts", "sshhost1,sshhost2", "--ssh-config", str(ssh_lab.config),
        "--run-dir", str(run_dir),
        # the ranks' environment is explicit over ssh: the test hooks go with --env
        "--env", f"NODERUN_DEBUG_WAIT_FOR_SIGNAL=1:{EPOCH_2_STEP_5}",
        "--env", "NODERUN_PREEMPT_CHECK_SEC=0.01",
        CLASSIFIER, "--epochs", "2", "--resume", "auto",
    ]  # fmt: skip
    proc = start_noderun(command)
    try:
        _wait_for(run_dir / "logs" / "rank1.waiting-for-signal", proc)
        hosts = json.loads((run_dir / "runtime.json").read_text())["rank_hosts"]
        assert hosts == ["sshhost1", "sshhost2"], hosts  # rank 1 is the remote host's
        os.kill(_rank_process(run_dir, 1, CLASSIFIER).pid, signal.SIGUSR1)
        output, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == EXIT_PREEMPTED, output[-3000:]
    assert "sshhost1:0| noderun: preempted by a signal to another rank; checkpoint" in output
    assert "job preempted: a checkpoint was saved" in output, output[-2000:]
    assert json.loads((run_dir / "run.json").read_text())["status"] == "preempted"
    saved = checkpoint.latest(run_dir / "checkpoints")
    assert saved is not None and saved.name.startswith("epoch-0001-step-"), saved
    assert not processes_of_run(run_dir, CLASSIFIER), "a rank outlived the preemption on a host"

    resumed = noderun(command, timeout=300)
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-2000:]
    assert "continuing the preempted run" in resumed.stdout, resumed.stdout[:2000]
    assert f"resumed from {saved}" in resumed.stdout, resumed.stdout[-3000:]
    record = json.loads((run_dir / "run.json").read_text())
    assert record["status"] == "completed" and record["backend"] == "ssh"
    assert [a["status"] for a in record["attempts"]] == ["preempted"], record["attempts"]
    rows = (run_dir / "metrics.csv").read_text().splitlines()
    assert [r.split(",")[0] for r in rows[1:]] == ["1", "2"]  # no epoch twice
    verified = cli(["verify", str(run_dir)])
    assert verified.returncode == 0 and "HEALTHY" in verified.stdout, verified.stdout[-3000:]
