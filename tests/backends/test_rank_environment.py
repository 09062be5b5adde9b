"""The environment a rank sees: what plain torchrun gives its workers, every variable of it, in
every mode of noderun (local torchrun mode, srun mode simulated here and on the Slurm lab, a
node started by hand), and ``--env K=V`` in every rank of every mode."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from noderun.backends.node_entry import OMP_NOTICE
from noderun.backends.ports import free_port
from tests.conftest import SCRIPTS, clean_env, noderun

DUMP = str(SCRIPTS / "env_dump.py")
# same value under torchrun and noderun, for a 1-node x 2 job without restarts
EXACT = (
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
    "ROLE_RANK", "ROLE_NAME", "ROLE_WORLD_SIZE", "OMP_NUM_THREADS", "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_SIGNALS_TO_HANDLE",
    "TORCH_NCCL_ASYNC_ERROR_HANDLING",
)  # fmt: skip
# set on both sides, to values of the launch (port, run id, error file)
SET = ("MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_ERROR_FILE")


def _env(out: Path, **extra: str) -> dict[str, str]:
    env = clean_env(DUMP_OUT=str(out), **extra)
    env.pop("OMP_NUM_THREADS", None)
    return env


def _seen(out: Path, world: int) -> dict[int, dict[str, str]]:
    seen = {int(p.stem[4:]): json.loads(p.read_text()) for p in out.glob("rank*.json")}
    assert sorted(seen) == list(range(world)), f"ranks that wrote: {sorted(seen)}"
    return seen


@pytest.fixture(scope="module")
def torchrun_gives(tmp_path_factory: pytest.TempPathFactory) -> dict[int, dict[str, Any]]:
    """Plain torchrun, 1 node x 2: each worker's variables that its launcher set."""
    out = tmp_path_factory.mktemp("torchrun")
    torchrun = shutil.which("torchrun", path=os.path.dirname(sys.executable))
    assert torchrun
    env = _env(out)
    done = subprocess.run(
        [torchrun, "--nnodes=1", "--nproc-per-node=2", DUMP],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert all(line in done.stderr for line in OMP_NOTICE[1:2])  # the notice is torchrun's
    return {r: {k: v for k, v in e.items() if env.get(k) != v} for r, e in _seen(out, 2).items()}


# srun mode has no torchelastic agent: TORCHELASTIC_RUN_ID would tell torch and Lightning it had
# one (Lightning then drops SLURMEnvironment and its auto-requeue)
NOT_IN_SRUN_MODE = {"TORCHELASTIC_RUN_ID"}


def _compare(
    torchrun: dict[int, dict[str, Any]], ours: dict[int, dict[str, str]], srun_mode: bool = False
) -> None:
    names = set(torchrun[0])
    assert set(EXACT) | set(SET) == names, "torchrun gives variables this test does not know"
    if srun_mode:
        names -= NOT_IN_SRUN_MODE
        assert not [name for env in ours.values() for name in NOT_IN_SRUN_MODE if name in env]
    for rank, env in ours.items():
        missing = sorted(names - set(env))
        assert not missing, f"rank {rank} lacks {missing}"
        assert {k: env[k] for k in EXACT} == {k: torchrun[rank][k] for k in EXACT}, rank


def test_torchrun_mode_gives_torchruns_environment_and_env_options(
    torchrun_gives: dict[int, dict[str, Any]], tmp_path: Path
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    done = noderun(
        ["run", "--nproc-per-node=2", f"--run-dir={tmp_path / 'run'}", "--env", "K=v w", DUMP],
        DUMP_OUT=str(out),
    )
    assert done.returncode == 0, done.stderr
    seen = _seen(out, 2)
    _compare(torchrun_gives, seen)
    assert {env["K"] for env in seen.values()} == {"v w"}


def _srun_mode_step(
    rank: int, run_dir: Path, port: int, out: Path, extra: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    """What srun starts for one rank of a 1-node x 2 srun-mode step (its variables by hand)."""
    step = {
        "SLURM_JOB_ID": "77",
        "SLURM_STEP_ID": "0",
        "SLURM_STEP_NODELIST": "localhost",
        "SLURM_JOB_NODELIST": "localhost",
        "SLURM_STEP_NUM_NODES": "1",
        "SLURM_STEP_TASKS_PER_NODE": "2",
        "SLURM_NODEID": "0",
        "SLURM_PROCID": str(rank),
        "SLURM_LOCALID": str(rank),
    }
    return subprocess.Popen(
        [sys.executable, "-m", "noderun.node", "--mode=srun", "--nproc-per-node=2",
         "--master-addr=127.0.0.1", f"--master-port={port}", f"--run-dir={run_dir}", "--", DUMP],
        env={**_env(out), **step, **(extra or {})},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def test_srun_mode_gives_torchruns_environment(
    torchrun_gives: dict[int, dict[str, Any]], tmp_path: Path
) -> None:
    """One task per rank and no torchrun agent: the node entry gives what the agent would,
    OMP_NUM_THREADS=1 with torchrun's notice once a node (local rank 0) included."""
    out = tmp_path / "out"
    out.mkdir()
    (tmp_path / "run" / "logs").mkdir(parents=True)
    port = free_port()
    tasks = [_srun_mode_step(rank, tmp_path / "run", port, out) for rank in (0, 1)]
    said = [task.communicate(timeout=120) for task in tasks]
    assert [task.returncode for task in tasks] == [0, 0], said
    seen = _seen(out, 2)
    _compare(torchrun_gives, seen, srun_mode=True)
    assert [err.count(OMP_NOTICE[1]) for _, err in said] == [1, 0]
    error_file = Path(seen[1]["TORCHELASTIC_ERROR_FILE"])
    assert error_file.parent.is_dir() and error_file.parent.parent.name == "torchelastic"
    from noderun.topology import Launcher, Topology

    # torchrun's names, but no agent: noderun.init still runs its own fail-fast rendezvous
    assert Topology.from_env(seen[0]).launcher is Launcher.ENV


def test_an_omp_num_threads_of_the_user_is_kept(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (tmp_path / "run" / "logs").mkdir(parents=True)
    port = free_port()
    mine = {"OMP_NUM_THREADS": "4"}
    tasks = [_srun_mode_step(rank, tmp_path / "run", port, out, mine) for rank in (0, 1)]
    said = [task.communicate(timeout=120) for task in tasks]
    assert [task.returncode for task in tasks] == [0, 0], said
    assert {env["OMP_NUM_THREADS"] for env in _seen(out, 2).values()} == {"4"}
    assert not any(OMP_NOTICE[1] in err for _, err in said)


def test_nodes_started_by_hand_give_torchruns_environment_and_env_options(
    torchrun_gives: dict[int, dict[str, Any]], tmp_path: Path
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    port = free_port()
    nodes = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "noderun",
                "run",
                "--nnodes=2",
                f"--node-rank={node}",
                "--master-addr=127.0.0.1",
                f"--master-port={port}",
                "--nproc-per-node=1",
                f"--run-dir={tmp_path / f'node{node}'}",
                "--env",
                "K=by hand",
                DUMP,
            ],
            env=_env(out),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for node in (0, 1)
    ]
    said = [node.communicate(timeout=180)[0] for node in nodes]
    assert [node.returncode for node in nodes] == [0, 0], said
    seen = _seen(out, 2)
    for rank, env in seen.items():  # one rank a node: torchrun leaves OMP_NUM_THREADS alone
        assert not sorted(set(torchrun_gives[0]) - {"OMP_NUM_THREADS"} - set(env)), rank
        assert "OMP_NUM_THREADS" not in env
        assert (env["K"], env["GROUP_RANK"], env["LOCAL_WORLD_SIZE"]) == ("by hand", str(rank), "1")


@pytest.mark.slurm
@pytest.mark.slow
@pytest.mark.parametrize("how", ["submit", "salloc"])
def test_srun_mode_on_the_lab_gives_torchruns_environment_and_env_options(
    torchrun_gives: dict[int, dict[str, Any]], tmp_path: Path, how: str
) -> None:
    """2 nodes x 2 ranks, one task per rank: `noderun submit --mode srun` and `noderun run
    --mode srun` inside an allocation (where --env was ignored)."""
    from tests.slurm.lab import PYTHON, require_lab, salloc

    require_lab()
    out = tmp_path / "out"
    out.mkdir()
    run = ["--mode=srun", "--nproc-per-node=2", f"--run-dir={tmp_path / 'run'}", "--env", "K=lab"]
    if how == "submit":
        done = noderun(
            ["submit", "--wait", "--nodes=2", "--time=5", *run, DUMP], timeout=300,
            DUMP_OUT=str(out),
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
    else:
        os.environ["DUMP_OUT"] = str(out)  # salloc's shell passes it on
        try:
            started = salloc(
                ["--nodes=2", "--ntasks-per-node=2", PYTHON, "-m", "noderun", "run", *run, DUMP]
            )
        finally:
            del os.environ["DUMP_OUT"]
        said, _ = started.communicate(timeout=300)
        assert started.returncode == 0, said
    seen = _seen(out, 4)
    for rank, env in seen.items():
        assert not sorted(set(torchrun_gives[0]) - set(env) - NOT_IN_SRUN_MODE), rank
        assert (env["K"], env["OMP_NUM_THREADS"], env["LOCAL_WORLD_SIZE"]) == ("lab", "1", "2")
        assert env["GROUP_RANK"] == str(rank // 2) and "TORCHELASTIC_RUN_ID" not in env
