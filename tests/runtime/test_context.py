"""noderun.init(): a world of one in-process; plain torchrun, plain srun and bad worlds for real."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from torch.utils.data import TensorDataset

import noderun
from noderun.runtime import pick_backend
from tests.conftest import SCRIPTS, clean_env
from tests.conftest import noderun as noderun_cli


def test_backend_choice() -> None:
    assert pick_backend(cuda_available=True) == "nccl"
    assert pick_backend(cuda_available=False) == "gloo"
    assert pick_backend(cuda_available=True, requested="gloo") == "gloo"


def test_bare_python_is_a_world_of_one(tmp_path: Path) -> None:
    with noderun.init(run_dir=tmp_path, environ={}) as ctx:
        assert (ctx.rank, ctx.local_rank, ctx.world_size, ctx.node_rank) == (0, 0, 1, 0)
        assert ctx.is_main and ctx.device == torch.device("cpu") and ctx.backend == "gloo"
        assert ctx.all_reduce_mean({"loss": 2.5, "acc": 1.0}) == {"loss": 2.5, "acc": 1.0}
        assert ctx.all_reduce_sum(3.0) == 3.0
        assert torch.equal(ctx.all_reduce_mean(torch.ones(3)), torch.ones(3))
        assert ctx.broadcast_object({"a": 1}) == {"a": 1}
        assert ctx.gather_object("x") == ["x"]
        data = TensorDataset(torch.arange(10.0))
        loader = ctx.loader(data, batch_size=4, shuffle=False)
        assert [b[0].tolist() for b in loader] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
        ctx.set_epoch(loader, 3)
        assert loader.sampler.epoch == 3  # type: ignore[attr-defined]
        model = ctx.prepare(torch.nn.Linear(2, 1))
        assert isinstance(model, torch.nn.Linear)  # no DDP wrapper for one process
    runtime = json.loads((tmp_path / "runtime.json").read_text())
    assert runtime["world_size"] == 1 and runtime["process_group_initialized"] is False


def test_init_refuses_a_broken_environment(tmp_path: Path) -> None:
    with pytest.raises(noderun.TopologyError, match="rank 4 >= world_size 4"):
        noderun.init(run_dir=tmp_path, environ={"RANK": "4", "WORLD_SIZE": "4"})


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.slow
def test_under_plain_torchrun(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node=2",
            str(SCRIPTS / "gang.py"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env=clean_env(NODERUN_RUN_DIR=str(tmp_path / "run")),
    )
    assert result.returncode == 0, result.stderr
    assert "rank 1 of 2 on node 0 sum=1" in result.stdout
    runtime = json.loads((tmp_path / "run" / "runtime.json").read_text())
    assert runtime["topology"]["launcher"] == "torchrun" and runtime["world_size"] == 2


def _one_rank_of(
    world: int, rank: int, port: int, tmp_path: Path
) -> subprocess.CompletedProcess[str]:
    """Start only ``rank`` of a ``world``-rank job (hand-set env, no torchrun), 3 s join timeout."""
    return subprocess.run(
        [sys.executable, str(SCRIPTS / "gang.py")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env=clean_env(
            RANK=str(rank),
            WORLD_SIZE=str(world),
            LOCAL_RANK=str(rank),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
            NODERUN_JOIN_TIMEOUT="3",
            NODERUN_RUN_DIR=str(tmp_path / "run"),
        ),
    )


@pytest.mark.slow
def test_missing_ranks_fail_fast_and_are_named(tmp_path: Path) -> None:
    """Only rank 0 of a 3-rank world starts: it must fail within the join timeout, naming 1, 2."""
    started = time.monotonic()
    result = _one_rank_of(3, 0, _free_port(), tmp_path)
    assert result.returncode != 0
    assert "1/3 ranks joined" in result.stderr
    assert "never arrived: ranks 1,2" in result.stderr
    assert "srun" in result.stderr  # the hint names the fix
    assert time.monotonic() - started < 60


@pytest.mark.slow
def test_unreachable_master_is_named(tmp_path: Path) -> None:
    port = _free_port()
    result = _one_rank_of(2, 1, port, tmp_path)
    assert result.returncode != 0
    assert f"could not reach the master 127.0.0.1:{port}" in result.stderr


@pytest.mark.slow
def test_plain_torch_script_under_noderun_run(tmp_path: Path) -> None:
    result = noderun_cli(
        [
            "run",
            "--nnodes",
            "2",
            "--nproc-per-node",
            "1",
            "--run-dir",
            str(tmp_path / "r"),
            str(SCRIPTS / "plain_torch.py"),
        ]
    )
    assert result.returncode == 0, result.stderr
    assert "1:1| plain rank=1 local_rank=0 world=2 sum=1" in result.stdout


@pytest.mark.slurm
def test_under_plain_srun(tmp_path: Path) -> None:
    """Two lab nodes, srun one task per rank, no torchrun: ranks come from SLURM variables."""
    result = subprocess.run(
        [
            "srun",
            "-N2",
            "--ntasks-per-node=2",
            "--kill-on-bad-exit=1",
            sys.executable,
            str(SCRIPTS / "gang.py"),
        ],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=tmp_path,
        env=clean_env(NODERUN_RUN_DIR=str(tmp_path / "run"), PATH="/usr/bin:/bin"),
    )
    assert result.returncode == 0, result.stderr
    for rank in range(4):
        assert f"rank {rank} of 4 on node {rank // 2} sum=6" in result.stdout
    runtime = json.loads((tmp_path / "run" / "runtime.json").read_text())
    assert runtime["topology"]["launcher"] == "slurm"
    # the allocation's two nodes, whichever the shared lab gave (other lanes' jobs run beside
    # it): two ranks on each, node 0 (the first) the master
    first, second = sorted(set(runtime["rank_hosts"]))
    assert runtime["rank_hosts"] == [first, first, second, second]
    assert runtime["topology"]["master_addr"] == first
