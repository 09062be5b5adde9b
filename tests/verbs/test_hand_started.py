"""Seed 001 without a scheduler: one `noderun run --node-rank R …` per machine, any order."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from noderun import timeline
from noderun.backends.ports import free_port
from tests.conftest import ROOT, SCRIPTS, noderun, wait_until

pytestmark = pytest.mark.slow


def _node(rank: int, port: int, run_dir: Path, *extra: str) -> list[str]:
    return [
        "run", "--nnodes", "2", "--nproc-per-node", "2", "--node-rank", str(rank),
        "--master-addr", "127.0.0.1", "--master-port", str(port), "--run-dir", str(run_dir),
        *extra, str(SCRIPTS / "gang.py"),
    ]  # fmt: skip


def _text(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def test_two_nodes_started_by_hand_in_reverse_order_both_complete(tmp_path: Path) -> None:
    port = free_port()
    second = subprocess.Popen(
        [sys.executable, "-m", "noderun", *_node(1, port, tmp_path / "node1")],
        cwd=ROOT,
        env={**os.environ, "GANG_MODE": "ok"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    entered = timeline.path(tmp_path / "node1")  # node 1 first, at the gate for node 0
    if not wait_until(lambda: '"node_entered"' in _text(entered), 60):
        second.kill()
        raise AssertionError(f"node 1 never started: {second.communicate()[1][-1500:]}")
    first = noderun(_node(0, port, tmp_path / "node0"), cwd=ROOT, timeout=120)
    out, err = second.communicate(timeout=120)
    assert first.returncode == 0, first.stdout[-1500:] + first.stderr[-1500:]
    assert second.returncode == 0, out[-1500:] + err[-1500:]
    assert "0:0| rank 0 of 4 on node 0 sum=6" in first.stdout
    assert "1:3| rank 3 of 4 on node 1 sum=6" in out
    for rank, node in ((0, 0), (3, 1)):
        log = (tmp_path / f"node{node}" / "logs" / f"rank{rank}.log").read_text()
        assert f"rank {rank} of 4" in log
    record = json.loads((tmp_path / "node0" / "run.json").read_text())
    assert record["status"] == "completed" and record["topology"]["world_size"] == 4


def test_the_node_that_never_comes_is_named(tmp_path: Path) -> None:
    port = free_port()
    result = noderun(
        _node(0, port, tmp_path / "node0", "--join-timeout", "3"), cwd=ROOT, timeout=60
    )
    assert result.returncode != 0
    said = result.stderr + result.stdout
    assert "never arrived: node 1" in said, result.stderr[-1500:]
    assert "--node-rank R --master-addr NODE0" in said and "srun" not in said


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--node-rank", "0", "--nnodes", "2"], "needs --node-rank, --nnodes (2 or more)"),
        (["--node-rank", "2", "--nnodes", "2", "--master-addr", "h"], "--node-rank 2 is not in"),
        (["--master-addr", "h", "--nnodes", "2"], "needs --node-rank"),
    ],
)
def test_incomplete_hand_start_is_one_line(tmp_path: Path, args: list[str], expected: str) -> None:
    result = noderun(["run", *args, "--run-dir", str(tmp_path / "r"), str(SCRIPTS / "gang.py")])
    assert result.returncode == 2 and expected in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
