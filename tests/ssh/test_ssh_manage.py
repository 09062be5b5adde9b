"""`noderun ls / status / logs / cancel` of a `noderun run --hosts` run on the SSH lab: it is
listed running, its status is JSON with both ranks on their hosts, rank 1 (on the second host)
is shown and followed (-f ends with the run); a graceful cancel reaches the ranks over SSH on
each host, every rank checkpoints, the run ends `cancelled`, nothing of it is left on any host,
and the same command continues it from those checkpoints to the end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from noderun.exit_codes import EXIT_PREEMPTED
from tests.conftest import (
    SCRIPTS,
    cli,
    follow_logs,
    noderun,
    processes_of_run,
    start_noderun,
    wait_until,
)
from tests.ssh.lab import SshLab

pytestmark = [pytest.mark.slow, pytest.mark.ssh]
PACED = str(SCRIPTS / "paced_trainer.py")


def _text(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _steps(lines: list[str]) -> list[int]:
    return [int(line.rsplit(" ", 1)[1]) for line in lines if line.startswith("rank 1 step ")]


def _paced_on_both_hosts(
    ssh_lab: SshLab, run_dir: Path, *script_args: str, pace: str = "0.1"
) -> list[str]:
    """`noderun run` of the paced trainer on both lab hosts, 0.1 s a step, 600 steps (60 s:
    cancelled long before its end)."""
    return [
        "run", "--hosts", "sshhost1,sshhost2", "--ssh-config", str(ssh_lab.config),
        "--run-dir", str(run_dir), "--env", f"PACED_STEP_SEC={pace}",
        PACED, *script_args, "--max-steps", "600",
    ]  # fmt: skip


def test_logs_and_graceful_cancel_over_ssh(ssh_lab: SshLab, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    proc = start_noderun(_paced_on_both_hosts(ssh_lab, run_dir, "--resume", "auto"))
    follow = None
    try:
        rank1 = run_dir / "logs" / "rank1.log"
        assert wait_until(lambda: "rank 1 step 3\n" in _text(rank1), 180), proc.stdout
        listed = json.loads(cli(["ls", "--json", str(tmp_path)]).stdout)["runs"]
        assert [(r["name"], r["backend"], r["status"], r["nodes"]) for r in listed] == [
            ("run", "ssh", "running", 2)
        ], listed
        shown = cli(["logs", str(run_dir), "--node", "1", "--grep", "step [23]$"])
        assert shown.stdout.splitlines()[:2] == ["rank 1 step 2", "rank 1 step 3"], shown
        follow, followed, reader = follow_logs("--rank", "1", str(run_dir))
        status = cli(["status", "--json", str(run_dir)])
        seen = json.loads(status.stdout)
        assert (seen["status"], seen["backend"], seen["nodes"]) == ("running", "ssh", 2), seen
        assert [r["rank"] for r in seen["ranks"]] == [0, 1], seen
        assert all(r["host"] and r["step"] >= 3 for r in seen["ranks"]), seen  # from both hosts
        shown_steps = _steps(shown.stdout.splitlines())
        assert wait_until(lambda: max(_steps(list(followed)), default=0) > shown_steps[-1], 60)

        cancelled = noderun(["cancel", str(run_dir)], timeout=180)
        assert cancelled.returncode == 0, cancelled.stdout + cancelled.stderr
        assert "2 rank(s) asked to checkpoint" in cancelled.stderr, cancelled.stderr
        assert "every rank saved a checkpoint" in cancelled.stdout, cancelled.stdout
        output, _ = proc.communicate(timeout=60)
        assert follow.wait(timeout=30) == 0  # -f ends with the run
        reader.join(timeout=5)
    finally:
        for started in [proc, *([follow] if follow else [])]:
            if started.poll() is None:
                started.kill()
                started.wait()
    assert _steps(followed) == sorted(_steps(followed)), followed  # each line once, in order
    assert proc.returncode == EXIT_PREEMPTED, output[-2000:]
    assert "job cancelled by `noderun cancel`" in output
    record = json.loads((run_dir / "run.json").read_text())
    assert record["status"] == "cancelled" and record["backend"] == "ssh", record
    assert not processes_of_run(run_dir, PACED), "a rank outlived the cancel on a host"

    # the same command (unpaced, to finish quickly) continues from every rank's checkpoint
    resumed = noderun(_paced_on_both_hosts(ssh_lab, run_dir, "--resume", "auto", pace="0"),
                      timeout=240)  # fmt: skip
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-2000:]
    record = json.loads((run_dir / "run.json").read_text())
    assert record["status"] == "completed", record
    assert "cancelled" in [a["status"] for a in record["attempts"]], record["attempts"]
    assert "noderun: resumed from" in _text(run_dir / "logs" / "rank0.log")


def test_cancel_now_over_ssh_stops_every_host_at_once(ssh_lab: SshLab, tmp_path: Path) -> None:
    """`cancel --now`: the launcher tears the gang down on both hosts at once (no SIGUSR1 is
    sent; the runtime still commits its newest checkpoint on the SIGTERM of the teardown)."""
    run_dir = tmp_path / "run"
    proc = start_noderun(_paced_on_both_hosts(ssh_lab, run_dir))
    try:
        rank1 = run_dir / "logs" / "rank1.log"
        assert wait_until(lambda: "rank 1 step 2\n" in _text(rank1), 180), proc.stdout
        cancelled = noderun(["cancel", "--now", str(run_dir)], timeout=120)
        assert cancelled.returncode == 0, cancelled.stdout + cancelled.stderr
        assert "stopped at once" in cancelled.stdout, cancelled.stdout
        output, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode != 0, output[-2000:]
    record = json.loads((run_dir / "run.json").read_text())
    assert record["status"] == "cancelled" and record["backend"] == "ssh", record
    assert "rank 1 step 600" not in _text(rank1)
    assert not processes_of_run(run_dir, PACED), "a rank outlived the cancel on a host"
