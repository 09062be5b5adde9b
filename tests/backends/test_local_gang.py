"""Real local multi-node launches: success, a crashing rank, SIGKILL teardown, Ctrl-C/SIGTERM."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import SCRIPTS, clean_env, cli, noderun, processes_running, run_args

pytestmark = pytest.mark.slow


@pytest.fixture
def gang_script(tmp_path: Path) -> Path:
    """A private copy of the workload, so leftover processes can be found by its path."""
    target = tmp_path / f"gang_{tmp_path.name}.py"
    shutil.copy(SCRIPTS / "gang.py", target)
    return target


def test_two_nodes_two_procs_success(tmp_path: Path, gang_script: Path) -> None:
    run_dir = tmp_path / "run"
    result = noderun(
        run_args(gang_script, run_dir),
    )
    assert result.returncode == 0, result.stderr
    for rank in range(4):
        node = rank // 2
        assert f"{node}:{rank}| rank {rank} of 4 on node {node} sum=6" in result.stdout
        log = (run_dir / "logs" / f"rank{rank}.log").read_text()
        assert f"rank {rank} of 4 on node {node} sum=6" in log
    record = json.loads((run_dir / "run.json").read_text())
    assert record["status"] == "completed" and record["exit_code"] == 0
    assert record["topology"]["world_size"] == 4
    assert record["node_exit_codes"] == {"0": 0, "1": 0}
    assert record["end_time"] >= record["start_time"]
    runtime = json.loads((run_dir / "runtime.json").read_text())
    assert runtime["world_size"] == 4 and runtime["backend"] == "gloo"
    assert runtime["topology"]["launcher"] == "torchrun"
    assert "job completed" in result.stdout
    stages = {row["stage"]: row for row in record["timeline"]}
    order = ["launcher_started", "step_started", "rank_started", "process_group_up"]
    order += ["rank_exited", "step_ended", "teardown_done"]
    assert list(stages) == order, list(stages)
    assert all(stages[s]["count"] == 4 for s in ("rank_started", "process_group_up", "rank_exited"))
    firsts = [stages[s]["first"] for s in order]
    assert firsts == sorted(firsts), firsts
    shown = cli(["verify", str(run_dir), "--timeline", "--skip=checkpoint", "--skip=metrics"])
    assert "rank_started" in shown.stdout and "teardown_done" in shown.stdout, shown.stdout


def test_a_raising_rank_is_named_with_its_error(tmp_path: Path, gang_script: Path) -> None:
    """2 nodes x 1 rank: rank 1 (node 1) raises (the ranks of a node of 2 by their local rank:
    test_sigkilled_rank_tears_down_the_gang_within_10_s)."""
    run_dir = tmp_path / "run"
    result = noderun(
        run_args(gang_script, run_dir, nproc=1),
        GANG_MODE="raise:1",
    )
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert "rank 1 (node 1, local rank 0) failed" in last
    assert "ValueError: deliberate failure on rank 1" in last
    record = json.loads((run_dir / "run.json").read_text())
    assert record["status"] == "failed"
    assert record["failure"]["rank"] == 1 and record["failure"]["node_rank"] == 1
    assert not processes_running(str(gang_script))


def test_sigkilled_rank_tears_down_the_gang_within_10_s(tmp_path: Path, gang_script: Path) -> None:
    result = noderun(
        run_args(gang_script, tmp_path / "r"),
        GANG_MODE="sigkill:3",
    )
    ended = time.time()
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert "rank 3 (node 1, local rank 1) failed: killed by SIGKILL" in last
    assert not processes_running(str(gang_script))
    killed_at = float((tmp_path / "r" / "killed_at").read_text())
    assert ended - killed_at < 10, f"gang took {ended - killed_at:.1f} s to end after the kill"


# SIGINT on 2 nodes x 2 ranks (every local rank of a node stopped), SIGTERM on 2 x 1
@pytest.mark.parametrize(("signum", "nproc"), [(signal.SIGINT, 2), (signal.SIGTERM, 1)])
def test_signal_to_noderun_stops_every_rank(
    tmp_path: Path, gang_script: Path, signum: signal.Signals, nproc: int
) -> None:
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "noderun", *run_args(gang_script, run_dir, nproc=nproc)],
        env=clean_env(GANG_MODE="hang"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and not (run_dir / "runtime.json").exists():
        time.sleep(0.2)
    assert (run_dir / "runtime.json").exists(), "ranks never started"
    # noderun, 2 agents, 2 x nproc ranks
    assert len(processes_running(str(gang_script))) >= 2 + 2 * nproc
    sent = time.monotonic()
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=30)
    assert time.monotonic() - sent < 10
    assert proc.returncode == 128 + signum
    assert f"interrupted by {signum.name}" in err
    assert not processes_running(str(gang_script))
    record = json.loads((run_dir / "run.json").read_text())
    assert record["status"] == "interrupted"


def test_a_rank_dying_after_its_peers_lost_it_is_named_not_the_peer(
    tmp_path: Path, gang_script: Path
) -> None:
    """Rank 1 fails at once with a lost-peer error and its node exits first; rank 0 dies by
    SIGKILL 1.5 s later. The cause is rank 0, not the first node seen to fail."""
    result = noderun(
        run_args(gang_script, tmp_path / "r", nproc=1),
        GANG_MODE="latekill:0",
    )
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert "rank 0 (node 0, local rank 0) failed: killed by SIGKILL" in last, result.stderr[-2000:]
    record = json.loads((tmp_path / "r" / "run.json").read_text())
    assert record["failure"]["rank"] == 0
    assert not processes_running(str(gang_script))
