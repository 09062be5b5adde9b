"""`noderun ls / status / logs / cancel` on real local 2-node runs: a run is listed while it
runs, rank 1's lines are shown (those since a time: cut inside the log) and followed, its
status is JSON per rank; a graceful cancel
checkpoints every rank and ends it `cancelled`, and the same command resumes it; a plain-torch
script (no noderun) is listed, shown and stopped at once with --now; nothing is left running."""

from __future__ import annotations

import json
import math
import os
import subprocess
import time
from datetime import UTC, datetime
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

pytestmark = pytest.mark.slow

PACED = str(SCRIPTS / "paced_trainer.py")
PLAIN = str(SCRIPTS / "plain_ticker.py")
TWO_NODES = ["run", "--nnodes", "2", "--nproc-per-node", "1"]


def _text(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _steps(lines: list[str]) -> list[int]:
    return [int(line.rsplit(" ", 1)[1]) for line in lines if line.startswith("rank 1 step ")]


def _listed(root: Path) -> list[tuple[str, str]]:
    listed = cli(["ls", "--json", str(root)])
    assert listed.returncode == 0, listed.stderr
    return [(r["name"], r["status"]) for r in json.loads(listed.stdout)["runs"]]


def _stop(*procs: subprocess.Popen[str]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_listed_followed_cancelled_with_a_checkpoint_then_resumed(tmp_path: Path) -> None:
    run_dir = tmp_path / "runs" / "paced"
    command = [*TWO_NODES, "--run-dir", str(run_dir), PACED, "--resume", "auto"]
    command += ["--max-steps", "600"]  # 60 s at 0.1 s a step: cancelled long before its end
    proc = start_noderun(command, PACED_STEP_SEC="0.1")
    follow = None
    try:
        rank1 = run_dir / "logs" / "rank1.log"
        assert wait_until(lambda: "rank 1 step 3\n" in _text(rank1), 120), proc.stdout
        mark = math.floor(time.time()) + 1  # steps 1-3 were written before it
        assert _listed(tmp_path / "runs") == [("paced", "running")]

        shown = cli(["logs", str(run_dir), "--rank", "1"])
        assert shown.returncode == 0, shown.stderr
        before = _steps(shown.stdout.splitlines())
        assert before[:3] == [1, 2, 3], shown.stdout  # rank 1's own lines, without a prefix

        follow, followed, reader = follow_logs("--rank", "1", str(run_dir))
        assert wait_until(lambda: max(_steps(list(followed)), default=0) > before[-1], 60)

        status = cli(["status", "--json", str(run_dir)])
        assert status.returncode == 0, status.stderr
        seen = json.loads(status.stdout)
        assert seen["status"] == "running" and seen["nodes"] == 2, seen
        assert [r["rank"] for r in seen["ranks"]] == [0, 1]
        assert all(r["progress"] and r["last_line_age_sec"] is not None for r in seen["ranks"])
        assert all(r["step"] >= 3 and r["epoch"] is None for r in seen["ranks"]), seen  # step mode
        assert wait_until(lambda: os.stat(rank1).st_mtime > mark + 0.5, 30)
        since = datetime.fromtimestamp(mark, UTC).strftime("%Y-%m-%dT%H:%M:%S")
        recent = cli(["logs", str(run_dir), "--rank", "1", "--since", since])
        assert _steps(recent.stdout.splitlines()), recent.stdout + recent.stderr
        assert min(_steps(recent.stdout.splitlines())) > 3, recent.stdout  # cut inside the log

        cancelled = noderun(["cancel", str(run_dir)], timeout=180)
        assert cancelled.returncode == 0, cancelled.stdout + cancelled.stderr
        assert "every rank saved a checkpoint" in cancelled.stdout, cancelled.stdout
        output, _ = proc.communicate(timeout=60)
        assert follow.wait(timeout=30) == 0  # -f ends with the run
        reader.join(timeout=5)
    finally:
        _stop(proc, *([follow] if follow else []))
    assert proc.returncode == EXIT_PREEMPTED, output[-2000:]
    assert "noderun: preempted by `noderun cancel` (SIGUSR1); checkpoint" in output
    assert "job cancelled by `noderun cancel`" in output
    record = json.loads((run_dir / "run.json").read_text())
    assert record["status"] == "cancelled", record
    assert not processes_of_run(run_dir, PACED), "a rank outlived the cancel"
    again = noderun(["cancel", str(run_dir)])
    assert again.returncode == 2 and "already ended (cancelled)" in again.stderr

    resumed = noderun(command, timeout=300, PACED_STEP_SEC="0")
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-2000:]
    assert "continuing the cancelled run" in resumed.stdout
    assert "noderun: resumed from" in resumed.stdout and "/checkpoints/step-" in resumed.stdout
    record = json.loads((run_dir / "run.json").read_text())
    assert record["status"] == "completed", record
    assert [a["status"] for a in record["attempts"]] == ["cancelled"]
    assert _listed(tmp_path / "runs") == [("paced", "completed")]


def test_a_plain_torch_run_listed_shown_and_cancelled_at_once(tmp_path: Path) -> None:
    run_dir = tmp_path / "runs" / "plain"
    proc = start_noderun([*TWO_NODES, "--run-dir", str(run_dir), PLAIN])
    try:
        rank1 = run_dir / "logs" / "rank1.log"
        assert wait_until(lambda: "plain rank 1 tick 2\n" in _text(rank1), 120), proc.stdout
        assert _listed(tmp_path / "runs") == [("plain", "running")]
        shown = cli(["logs", str(run_dir), "--node", "1", "--grep", "tick [12]$"])
        assert shown.stdout.splitlines()[:2] == ["plain rank 1 tick 1", "plain rank 1 tick 2"]
        cancelled = noderun(["cancel", "--now", str(run_dir)], timeout=120)
        assert cancelled.returncode == 0, cancelled.stdout + cancelled.stderr
        assert "stopped at once" in cancelled.stdout, cancelled.stdout
        output, _ = proc.communicate(timeout=60)
    finally:
        _stop(proc)
    assert "job cancelled by `noderun cancel` (at once" in output, output[-2000:]
    assert json.loads((run_dir / "run.json").read_text())["status"] == "cancelled"
    assert not processes_of_run(run_dir, PLAIN), "a rank outlived cancel --now"
    status = cli(["status", str(run_dir)])
    assert status.returncode == 0 and "status   cancelled" in status.stdout, status.stdout
    explained = cli(["explain", str(run_dir)])
    assert explained.stdout.startswith("root cause: cancelled: "), explained.stdout
