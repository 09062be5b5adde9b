"""RunRequest.materialize(): the plan of every kind of ``noderun run`` from values alone.

Nothing here touches the filesystem, a socket or a process: the paths do not exist."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from noderun.errors import UsageError
from noderun.plan.launch import LaunchPlan
from noderun.plan.run import RunRequest, Where
from noderun.plan.slurm import LaunchMode, StepPlan

RUN = Path("/nowhere/runs/train-1")
LOCAL = RunRequest(
    where=Where.LOCAL,
    program="/nowhere/train.py",
    run_dir=RUN,
    nproc_per_node=2,
    script_args=("--lr", "a b"),
    nnodes=2,
    master_port=29511,
)


def test_local_nodes_share_one_rendezvous() -> None:
    plan = LOCAL.materialize()
    assert isinstance(plan, LaunchPlan)
    assert (plan.world_size, plan.master_addr, plan.master_port) == (4, "127.0.0.1", 29511)
    assert [n.env["NODERUN__NODE_RANK"] for n in plan.nodes] == ["0", "1"]
    assert plan.nodes[1].env["NODERUN__RUN_DIR"] == str(RUN)
    assert "--rdzv-id=train-1" in plan.nodes[0].argv
    assert plan.nodes[0].argv[-2:] == ("--lr", "a b")


def test_nproc_words_resolve_against_the_counts_given() -> None:
    assert (
        dataclasses.replace(LOCAL, nproc_per_node="cpu", cpus=6).launch_plan().nproc_per_node == 6
    )
    assert (
        dataclasses.replace(LOCAL, nproc_per_node="auto", gpus=4).launch_plan().nproc_per_node == 4
    )
    with pytest.raises(UsageError, match="no GPU is visible"):
        dataclasses.replace(LOCAL, nproc_per_node="gpu", gpus=0).materialize()


def test_restarts_reach_every_rank() -> None:
    plan = dataclasses.replace(LOCAL, max_restarts=3, attempt=2).launch_plan()
    env = plan.nodes[0].env
    assert (env["NODERUN__RESTART_COUNT"], env["NODERUN__MAX_RESTARTS"]) == ("2", "3")
    assert "NODERUN__RESTART_COUNT" not in LOCAL.launch_plan().nodes[0].env


def test_by_hand_runs_this_machines_node_entry() -> None:
    request = dataclasses.replace(
        LOCAL, where=Where.BY_HAND, master_port=None, node_rank=1, master_addr="10.0.0.1",
        host="box2", join_timeout=7,
    )  # fmt: skip
    plan = request.launch_plan()
    (node,) = plan.nodes
    assert (node.node_rank, node.host, plan.master_port) == (1, "box2", 29500)
    assert node.argv[1:3] == ("-m", "noderun.node")
    assert "--run-id=hand-10.0.0.1-29500" in node.argv and "--join-timeout=7" in node.argv


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"node_rank": None}, "needs --node-rank, --nnodes (2 or more)"),
        ({"nnodes": 1}, "needs --node-rank, --nnodes (2 or more)"),
        ({"node_rank": 2}, "--node-rank 2 is not in 0..1"),
    ],
)
def test_by_hand_refusals(changes: dict[str, object], words: str) -> None:
    values: dict[str, object] = {"node_rank": 1, "master_addr": "10.0.0.1", **changes}
    request = dataclasses.replace(LOCAL, where=Where.BY_HAND, **values)  # type: ignore[arg-type]
    with pytest.raises(UsageError) as caught:
        request.materialize()
    assert words in str(caught.value)


def test_ssh_one_node_per_host() -> None:
    request = dataclasses.replace(
        LOCAL, where=Where.SSH, nnodes=None, hosts=("h0", "h1"), cwd="/w", env=(("A", "1"),)
    )
    plan = request.launch_plan()
    assert [n.host for n in plan.nodes] == ["h0", "h1"] and plan.master_addr == "h0"
    assert all(n.remote and n.argv[0] == "ssh" for n in plan.nodes)
    with pytest.raises(UsageError, match="--nnodes 3 but 2 host"):
        dataclasses.replace(request, nnodes=3).materialize()


ALLOCATION = RunRequest(
    where=Where.SLURM,
    program="/nowhere/train.py",
    run_dir=RUN,
    nproc_per_node=2,
    hosts=("node1", "node2", "node3"),
    job_id="77",
    cpus=2,
)


def test_step_over_the_first_nodes_of_the_allocation() -> None:
    step = dataclasses.replace(ALLOCATION, nnodes=2).materialize()
    assert isinstance(step, StepPlan)
    assert (step.nnodes, step.hosts, step.nodelist) == (2, ("node1", "node2"), "node1,node2")
    whole = ALLOCATION.materialize()
    assert isinstance(whole, StepPlan) and whole.nnodes == 3 and whole.nodelist is None


def test_step_refusals_name_the_allocation() -> None:
    with pytest.raises(UsageError, match="--nnodes 4 but job 77 has 3 node"):
        dataclasses.replace(ALLOCATION, nnodes=4).materialize()
    srun = dataclasses.replace(ALLOCATION, mode=LaunchMode.SRUN, nproc_per_node=3)
    with pytest.raises(UsageError, match="needs that many CPUs per node"):
        srun.materialize()
    with pytest.raises(AssertionError):
        ALLOCATION.launch_plan()
