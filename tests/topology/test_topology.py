"""Topology.from_env over real variable sets (captured on the Slurm lab and from torchrun)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from noderun.errors import (
    DeviceOrdinalError,
    InconsistentTopologyError,
    MissingLauncherError,
    TopologyError,
)
from noderun.topology import Launcher, Topology, detect_launcher, port_for_job

FIXTURES = Path(__file__).parent / "fixtures"


def captured(name: str) -> dict[str, str]:
    return json.loads((FIXTURES / f"{name}.json").read_text())


@pytest.mark.parametrize(
    ("name", "rank", "local_rank", "node_rank", "world", "local_world", "nnodes"),
    [
        ("srun_2x2_rank0", 0, 0, 0, 4, 2, 2),
        ("srun_2x2_rank1", 1, 1, 0, 4, 2, 2),
        ("srun_2x2_rank2", 2, 0, 1, 4, 2, 2),
        ("srun_2x2_rank3", 3, 1, 1, 4, 2, 2),
        ("srun_uneven_3tasks_rank0", 0, 0, 0, 3, 2, 2),
        ("srun_uneven_3tasks_rank2", 2, 0, 1, 3, 1, 2),
        ("torchrun_2x2_rank0", 0, 0, 0, 4, 2, 2),
        ("torchrun_2x2_rank3", 3, 1, 1, 4, 2, 2),
    ],
)
def test_real_launcher_variables(
    name: str, rank: int, local_rank: int, node_rank: int, world: int, local_world: int, nnodes: int
) -> None:
    topo = Topology.from_env(captured(name)).validate()
    assert (topo.rank, topo.local_rank, topo.node_rank) == (rank, local_rank, node_rank)
    assert (topo.world_size, topo.local_world_size, topo.nnodes) == (world, local_world, nnodes)
    assert topo.is_main == (rank == 0)


def test_srun_step_derives_master_from_step_nodelist_and_port_from_job() -> None:
    env = captured("srun_2x2_rank3")
    topo = Topology.from_env(env)
    assert topo.launcher is Launcher.SLURM
    assert topo.hosts == ("node1", "node2")
    assert topo.master_addr == "node1"
    assert topo.master_port == port_for_job(env["SLURM_JOB_ID"])


def test_torchrun_variables_win_over_slurm_step() -> None:
    env = {**captured("srun_2x2_rank1"), **captured("torchrun_2x2_rank3")}
    topo = Topology.from_env(env)
    assert topo.launcher is Launcher.TORCHRUN
    assert topo.rank == 3
    assert topo.master_addr == "127.0.0.1"


def test_batch_script_without_srun_is_the_seed_002_bug() -> None:
    env = captured("sbatch_no_srun_2x2")
    assert "SLURM_STEP_ID" not in env and env["SLURM_NTASKS"] == "4"
    with pytest.raises(MissingLauncherError) as err:
        Topology.from_env(env)
    message = str(err.value)
    assert "without srun" in message
    assert "1 of 4 ranks" in message
    assert "srun python" in message
    assert "\n" not in message


def test_one_task_batch_script_is_a_single_process() -> None:
    env = {**captured("sbatch_no_srun_2x2"), "SLURM_NTASKS": "1"}
    topo = Topology.from_env(env).validate()
    assert topo.launcher is Launcher.SINGLE and topo.world_size == 1


def test_bare_python_is_a_world_of_one() -> None:
    topo = Topology.from_env({}).validate()
    assert (topo.rank, topo.world_size, topo.launcher) == (0, 1, Launcher.SINGLE)
    assert not topo.is_distributed


def test_open_mpi_mapping() -> None:
    env = {
        "OMPI_COMM_WORLD_RANK": "5",
        "OMPI_COMM_WORLD_LOCAL_RANK": "1",
        "OMPI_COMM_WORLD_SIZE": "8",
        "OMPI_COMM_WORLD_LOCAL_SIZE": "4",
        "OMPI_COMM_WORLD_NODE_RANK": "1",
        "MASTER_ADDR": "head",
    }
    topo = Topology.from_env(env).validate()
    assert topo.launcher is Launcher.OPENMPI
    assert (topo.rank, topo.local_rank, topo.node_rank, topo.nnodes) == (5, 1, 1, 2)


@pytest.mark.parametrize(
    ("env", "devices", "error", "words"),
    [
        # seed 000: the global rank used as the device index on the second node
        (
            {
                "RANK": "5",
                "LOCAL_RANK": "5",
                "WORLD_SIZE": "8",
                "LOCAL_WORLD_SIZE": "8",
                "MASTER_ADDR": "h",
                "MASTER_PORT": "1",
            },
            4,
            DeviceOrdinalError,
            ["invalid device ordinal", "LOCAL_RANK, not RANK"],
        ),
        (
            {"RANK": "4", "WORLD_SIZE": "4", "LOCAL_RANK": "0", "MASTER_ADDR": "h"},
            0,
            InconsistentTopologyError,
            ["rank 4 >= world_size 4"],
        ),
        (
            {
                "RANK": "1",
                "WORLD_SIZE": "4",
                "LOCAL_RANK": "3",
                "LOCAL_WORLD_SIZE": "2",
                "MASTER_ADDR": "h",
            },
            0,
            InconsistentTopologyError,
            ["local_rank 3 >= local_world_size 2"],
        ),
        (
            {
                "RANK": "1",
                "WORLD_SIZE": "6",
                "LOCAL_RANK": "1",
                "LOCAL_WORLD_SIZE": "2",
                "GROUP_WORLD_SIZE": "2",
                "MASTER_ADDR": "h",
                "TORCHELASTIC_RUN_ID": "x",
            },
            0,
            InconsistentTopologyError,
            ["world_size 6 != nnodes 2 x local_world_size 2", "--nproc-per-node"],
        ),
        (
            {"RANK": "2", "WORLD_SIZE": "4", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2"},
            0,
            InconsistentTopologyError,
            ["MASTER_ADDR is not set", "2-node"],
        ),
        (
            {"RANK": "one", "WORLD_SIZE": "4"},
            0,
            InconsistentTopologyError,
            ["RANK='one' is not an integer"],
        ),
        (
            {"RANK": "-1", "WORLD_SIZE": "4", "MASTER_ADDR": "h"},
            0,
            InconsistentTopologyError,
            ["rank=-1 is negative"],
        ),
    ],
    ids=[
        "device-ordinal",
        "rank>=world",
        "local>=local_world",
        "not-homogeneous",
        "no-master",
        "not-int",
        "negative",
    ],
)
def test_bad_environments_raise_precise_errors(
    env: dict[str, str], devices: int, error: type[TopologyError], words: list[str]
) -> None:
    with pytest.raises(error) as raised:
        Topology.from_env(env).validate(device_count=devices)
    text = str(raised.value)
    for word in words:
        assert word in text
    assert "hint:" in text and "\n" not in text
    assert raised.value.exit_code == 2


def test_local_rank_within_devices_is_fine() -> None:
    env = {
        "RANK": "5",
        "LOCAL_RANK": "1",
        "WORLD_SIZE": "8",
        "LOCAL_WORLD_SIZE": "4",
        "GROUP_WORLD_SIZE": "2",
        "MASTER_ADDR": "h",
        "TORCHELASTIC_RUN_ID": "x",
    }
    assert Topology.from_env(env).validate(device_count=4).local_rank == 1


def test_detect_launcher_order() -> None:
    assert detect_launcher({"RANK": "0", "WORLD_SIZE": "1"}) is Launcher.ENV
    assert detect_launcher({"SLURM_PROCID": "0"}) is Launcher.SINGLE  # no step: not a rank source
    assert detect_launcher({"SLURM_PROCID": "0", "SLURM_STEP_ID": "0"}) is Launcher.SLURM


def test_describe_and_dict_round_trip() -> None:
    topo = Topology.from_env(captured("torchrun_2x2_rank3"))
    assert topo.describe() == "rank 3/4 (local 1/2, node 1/2) via torchrun"
    assert topo.to_dict()["launcher"] == "torchrun"
