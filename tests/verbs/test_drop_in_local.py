"""Scripts written like third-party ones under `noderun run` on simulated nodes of this machine:
the right world, verify's verdict, and for a failure the rank that raised."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import cli, noderun, start_noderun

pytestmark = pytest.mark.slow

USERS = Path(__file__).parents[1] / "slurm" / "workloads" / "users"


def test_the_rank_that_raised_is_named(tmp_path: Path) -> None:
    """2 simulated nodes x 1 rank: rank 1 (node 1) raises, rank 0 only loses it (the first
    failure among several ranks of a node: tests/backends/test_local_gang.py, 2 x 2)."""
    run_dir = tmp_path / "run"
    done = noderun(
        ["run", "--nnodes", "2", "--nproc-per-node", "1", "--run-dir", str(run_dir),
         str(USERS / "multinode_snapshot.py"), "2", "--snapshot", str(tmp_path / "snap.pt"),
         "--fail-rank", "1"],
        timeout=300,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    run = json.loads((run_dir / "run.json").read_text())
    assert run["failure"]["rank"] == 1, run["failure"]
    assert "rank 1 hit a bad batch" in done.stderr.splitlines()[-1]
    assert cli(["verify", str(run_dir)]).returncode == 1


def test_accelerate_on_cpu_without_its_variable_is_told(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    done = noderun(
        ["run", "--nnodes", "2", "--nproc-per-node", "1", "--run-dir", str(run_dir),
         str(USERS / "accelerate_style.py")],
        timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert "NOT distributed" in last and "ACCELERATE_USE_CPU=1" in last, done.stderr
    verdict = cli(["verify", str(run_dir)])
    assert verdict.returncode == 1 and "one-group" in verdict.stdout


# plain torch that does not distribute: no init_process_group at all, or a group of one each
ALONE = {
    "never-init": "import torch\nprint('trained alone', torch.ones(2).sum().item(), flush=True)\n",
    "groups-of-one": (
        "import os, sys\nimport torch.distributed as dist\n"
        "dist.init_process_group('gloo', init_method='file://' + sys.argv[1] + os.environ['RANK'],"
        " rank=0, world_size=1)\nprint('group of', dist.get_world_size(), flush=True)\n"
        "dist.destroy_process_group()\n"
    ),
}


def test_plain_torch_that_never_formed_one_group_is_told(tmp_path: Path) -> None:
    """Both scripts at once, 2 simulated nodes x 1 rank each."""
    started = {}
    for name, body in ALONE.items():
        (tmp_path / f"{name}.py").write_text(body)
        started[name] = start_noderun(
            ["run", "--nnodes", "2", "--nproc-per-node", "1", "--run-dir", str(tmp_path / name),
             str(tmp_path / f"{name}.py"), str(tmp_path / "store")]
        )  # fmt: skip
    said = {name: p.communicate(timeout=300)[0] for name, p in started.items()}
    # the launcher keeps its exit code
    assert {n: p.returncode for n, p in started.items()} == dict.fromkeys(ALONE, 0), said
    whats = {"never-init": "never called init_process_group", "groups-of-one": "group of one"}
    for name, what in whats.items():
        last = said[name].strip().splitlines()[-1]
        assert "NOT distributed: 2 ranks ran as 2 independent" in last and what in last, last
        assert "call torch.distributed.init_process_group()" in last, last
        verdict = cli(["verify", str(tmp_path / name)])
        assert verdict.returncode == 1 and "one-group" in verdict.stdout, verdict.stdout


def test_fsdp2_and_fabric_under_noderun_run(tmp_path: Path) -> None:
    """Two user-style scripts at once, 2 simulated nodes x 1 rank each: FSDP2 saving with
    DCP, Fabric given its LT_* variables by --env (Lightning without num_nodes: on the lab,
    tests/slurm/test_drop_in_lab.py, where it runs every way)."""
    lt = ["--env", "LT_ACCELERATOR=cpu", "--env", "LT_DEVICES=1", "--env", "LT_NUM_NODES=2"]
    runs = {
        "fsdp": [str(USERS / "fsdp2_dcp.py"), "--ckpt", str(tmp_path / "dcp")],
        "fabric": [*lt, str(USERS / "fabric_lt.py")],
    }
    one = ["run", "--nnodes", "2", "--nproc-per-node", "1"]
    started = {
        name: start_noderun([*one, "--run-dir", str(tmp_path / name), *args])
        for name, args in runs.items()
    }
    said = {name: p.communicate(timeout=300)[0] for name, p in started.items()}
    assert {n: p.returncode for n, p in started.items()} == dict.fromkeys(runs, 0), said
    verdicts = {name: cli(["verify", str(tmp_path / name)]) for name in runs}

    assert "fsdp2 world 2 saved" in said["fsdp"] and (tmp_path / "dcp" / ".metadata").is_file()
    assert "fabric world 2 rank 1" in said["fabric"]
    for name in runs:
        assert verdicts[name].returncode == 0, verdicts[name].stdout
        assert "the ranks formed a group of 2" in verdicts[name].stdout
