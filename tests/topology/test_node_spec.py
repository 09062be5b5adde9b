"""NodeSpec.from_env on environments captured in the lab's srun steps: pure, no scontrol."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from noderun.errors import TopologyError, UsageError
from noderun.topology import port_for_job
from noderun.topology.contract import RankContract
from noderun.topology.node_spec import LaunchMode, NodeSpec

FIXTURES = Path(__file__).parent / "fixtures"
RUN = Path("/shared/runs/r")


def captured(name: str) -> dict[str, str]:
    return dict(json.loads((FIXTURES / f"{name}.json").read_text()))


def test_srun_mode_rank_from_a_captured_step() -> None:
    spec = NodeSpec.from_env(
        captured("srun_2x2_rank3"),
        mode=LaunchMode.SRUN,
        nproc_per_node=2,
        run_dir=RUN,
        join_timeout=20,
    )
    assert (spec.index, spec.node_rank, spec.local_rank, spec.nnodes) == (3, 1, 1, 2)
    assert spec.hosts == ("node1", "node2")  # the pure parser expanded node[1-2]
    assert (spec.master_addr, spec.master_port) == ("node1", port_for_job("1"))
    assert spec.participants == 4 and spec.describe(3) == "rank 3 (node2)"
    assert spec.run_id == "1"
    assert spec.contract() == RankContract(
        run_dir=str(RUN), node_rank=1, join_timeout=20, mode="srun"
    )


def test_hosts_passed_in_win_over_the_parser() -> None:
    spec = NodeSpec.from_env(
        captured("srun_2x2_rank0"),
        mode=LaunchMode.SRUN,
        nproc_per_node=2,
        run_dir=RUN,
        join_timeout=20,
        hosts=("a", "b"),
    )
    assert spec.master_addr == "a" and spec.describe(2) == "rank 2 (b)"


def test_torchrun_mode_refuses_two_tasks_per_node() -> None:
    with pytest.raises(UsageError, match=r"2 noderun.node task\(s\) on node1 but torchrun"):
        NodeSpec.from_env(
            captured("srun_2x2_rank0"),
            mode=LaunchMode.TORCHRUN,
            nproc_per_node=2,
            run_dir=RUN,
            join_timeout=20,
        )


def test_batch_script_without_srun_is_refused() -> None:
    with pytest.raises(UsageError, match="not running inside an srun step"):
        NodeSpec.from_env(
            captured("sbatch_no_srun_2x2"),
            mode=LaunchMode.TORCHRUN,
            nproc_per_node=2,
            run_dir=RUN,
            join_timeout=20,
        )


def test_hand_started_node_needs_no_slurm() -> None:
    spec = NodeSpec.from_env(
        {},
        mode=LaunchMode.TORCHRUN,
        nproc_per_node=2,
        run_dir=RUN,
        join_timeout=5,
        nnodes=3,
        node_rank=2,
        master_addr="10.0.0.1",
        master_port=29500,
    )
    assert (spec.index, spec.participants, spec.run_id) == (2, 3, "r")
    assert spec.describe(2) == "node 2 (host unknown, ranks 4-5)"
    with pytest.raises(TopologyError, match=r"node rank 3 is not in 0\.\.2"):
        NodeSpec.from_env(
            {},
            mode=LaunchMode.TORCHRUN,
            nproc_per_node=2,
            run_dir=RUN,
            join_timeout=5,
            nnodes=3,
            node_rank=3,
            master_addr="10.0.0.1",
            master_port=29500,
        )
