"""`srun noderun run`: each task of the user's step is one node (or rank) of one job. The
refusals every task makes alike before anything starts, and the plan it joins. Step variables
as SLURM 22.05 sets them on the lab, no lab needed."""

from __future__ import annotations

import argparse
import dataclasses
import re
import socket
from pathlib import Path

import pytest

from noderun.backends import addresses
from noderun.errors import UsageError
from noderun.plan.slurm import LaunchMode
from noderun.verbs import run_in_step
from noderun.verbs.torchrun_flags import TorchrunFlags, _endpoint

STEP = {
    "SLURM_JOB_ID": "81",
    "SLURM_JOB_NODELIST": "node[1-3]",
    "SLURM_JOB_CPUS_PER_NODE": "2(x3)",
    "SLURM_STEP_ID": "0",
    "SLURM_STEP_NODELIST": "node[1-2]",
    "SLURM_STEP_NUM_NODES": "2",
    "SLURM_STEP_NUM_TASKS": "2",
    "SLURM_STEP_TASKS_PER_NODE": "1(x2)",
    "SLURM_NODEID": "1",
    "SLURM_PROCID": "1",
    "SLURMD_NODENAME": "node2",
}


def _args(script: Path, **options: object) -> argparse.Namespace:
    values: dict[str, object] = {
        "script": str(script),
        "script_args": ["--epochs", "1"],
        "nnodes": None,
        "nproc_per_node": 2,
        "run_dir": None,
        "master_port": None,
        "mode": LaunchMode.TORCHRUN,
        "join_timeout": 20.0,
        "dry_run": False,
        "node_rank": None,
        "master_addr": None,
        "hosts": None,
    }
    values.update(options)
    return argparse.Namespace(**values)


@pytest.fixture
def script(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "train.py"
    path.write_text("")
    return path


def test_only_inside_a_step_and_not_over_ssh(script: Path) -> None:
    assert run_in_step.wanted(_args(script), STEP)
    batch = {k: v for k, v in STEP.items() if k != "SLURM_STEP_ID"}
    assert not run_in_step.wanted(_args(script), batch)  # the batch script: run_slurm
    # torchrun's static form in the step (--node-rank $SLURM_NODEID): the same one job
    assert run_in_step.wanted(_args(script, node_rank=1, master_addr="node1"), STEP)
    assert not run_in_step.wanted(_args(script, hosts=["a", "b"]), STEP)
    assert not run_in_step.wanted(_args(script), {})


def test_every_node_plans_the_same_job(script: Path, tmp_path: Path) -> None:
    facts = run_in_step.StepFacts(STEP)
    args = _args(script, env=[("K", "v w")])
    step = run_in_step.build(args, TorchrunFlags(), STEP, facts)
    node0 = {**STEP, "SLURM_NODEID": "0", "SLURM_PROCID": "0", "SLURMD_NODENAME": "node1"}
    other = run_in_step.build(args, TorchrunFlags(), node0, run_in_step.StepFacts(node0))
    assert step == other
    assert ("K", "v w") in step.env  # --env: in the node entry's environment, so every rank's
    assert (step.nnodes, step.nproc_per_node, step.hosts) == (2, 2, ("node1", "node2"))
    assert step.mode is LaunchMode.TORCHRUN
    assert step.run_dir == (tmp_path / "runs" / "train-81.0").resolve()
    assert step.node_argv()[-3:] == [str(script), "--epochs", "1"]


def test_several_tasks_per_node_are_ranks_with_mode_srun(script: Path) -> None:
    env = {**STEP, "SLURM_STEP_TASKS_PER_NODE": "2(x2)", "SLURM_STEP_NUM_TASKS": "4"}
    facts = run_in_step.StepFacts(env)
    step = run_in_step.build(
        _args(script, mode=LaunchMode.SRUN, nproc_per_node=1), TorchrunFlags(), env, facts
    )
    assert (step.mode, step.nproc_per_node, step.world_size) == (LaunchMode.SRUN, 2, 4)
    assert facts.tasks == 4


@pytest.mark.parametrize(
    ("environ", "options", "words"),
    [
        ({"SLURM_STEP_TASKS_PER_NODE": "2(x2)"}, {}, "2 torchrun agents per node"),
        ({"SLURM_STEP_TASKS_PER_NODE": "2,1"}, {"mode": LaunchMode.SRUN}, "same number"),
        ({"SLURM_STEP_TASKS_PER_NODE": "2(x2)"}, {"mode": LaunchMode.SRUN, "nproc_per_node": 4},
         "every task is one rank"),
        ({}, {"nnodes": 3}, "--nnodes 3, but the srun step has 2"),
    ],
)  # fmt: skip
def test_mistakes_are_refused_alike_on_every_task(
    script: Path, environ: dict[str, str], options: dict[str, object], words: str
) -> None:
    env = {**STEP, **environ}
    with pytest.raises(UsageError, match=words):
        run_in_step.build(
            _args(script, **options), TorchrunFlags(), env, run_in_step.StepFacts(env)
        )


def test_a_refusal_is_one_line_naming_the_task(
    script: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    env = {**STEP, "SLURM_STEP_TASKS_PER_NODE": "2(x2)"}
    assert run_in_step.main(_args(script), TorchrunFlags(), env) == 2
    err = capfd.readouterr().err
    assert err.count("\n") == 1 and "task 1 on node2 (step 81.0)" in err
    assert not (tmp_path / "runs").exists()  # nothing started, nothing written


@pytest.fixture
def lab_names(monkeypatch: pytest.MonkeyPatch) -> None:
    """A resolver that knows the three nodes, and no other name."""
    known = {"node1": "10.0.0.1", "node2": "10.0.0.2", "node3": "10.0.0.3"}

    def resolve(name: str, *_: object) -> list[tuple[object, ...]]:
        if name not in known:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (known[name], 0))]

    monkeypatch.setattr(addresses.socket, "getaddrinfo", resolve)


@pytest.mark.parametrize(
    ("endpoint", "words"),
    [
        (
            "node3:29500",
            r"--rdzv-endpoint node3:29500 \(10.0.0.3\) is not node 0 \(node1: 10.0.0.1",
        ),
        ("10.9.9.9:29500", r"--rdzv-endpoint 10.9.9.9:29500 \(10.9.9.9\) is not node 0"),
        ("nowhere:29500", "nowhere does not resolve here"),
    ],
)
def test_an_endpoint_on_no_node_of_the_step_is_refused_on_every_task(
    script: Path, lab_names: None, capfd: pytest.CaptureFixture[str], endpoint: str, words: str
) -> None:
    """node3 is in the job but not in the step; node 0 of the step is node1 (by any name or
    address: tests/verbs/test_rendezvous_endpoint.py)."""
    flags = TorchrunFlags(endpoint=_endpoint(endpoint))
    for node, host in enumerate(("node1", "node2")):
        env = {
            **STEP,
            "SLURM_NODEID": str(node),
            "SLURM_PROCID": str(node),
            "SLURMD_NODENAME": host,
        }
        assert run_in_step.main(_args(script), flags, env) == 2
        err = capfd.readouterr().err
        assert err.count("\n") == 1 and f"task {node} on {host}" in err, err
        assert re.search(words, err), err
    assert not (script.parent / "runs").exists()  # nothing started, nothing written
    flags = TorchrunFlags(endpoint=_endpoint("10.0.0.1:29511"))  # node 0 by address: joins
    assert (
        run_in_step.build(_args(script), flags, STEP, run_in_step.StepFacts(STEP)).master_port
        == 29511
    )


def test_torchruns_static_form_is_this_node_of_the_one_job(script: Path, lab_names: None) -> None:
    """`srun bash -c 'noderun run --nnodes 2 --node-rank $SLURM_NODEID --master-addr node1
    --master-port P …'`, as with torchrun: the step's own plan, on P."""
    static = {"nnodes": 2, "node_rank": 1, "master_addr": "10.0.0.1", "master_port": 29533}
    step = run_in_step.build(
        _args(script, **static), TorchrunFlags(), STEP, run_in_step.StepFacts(STEP)
    )
    plain = run_in_step.build(_args(script), TorchrunFlags(), STEP, run_in_step.StepFacts(STEP))
    assert step == dataclasses.replace(plain, master_port=29533)


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"node_rank": 0}, r"--node-rank 0, but this task runs on node 1 of the srun step"),
        ({"node_rank": 1, "master_addr": "node2"}, r"--master-addr node2 \(10.0.0.2\) is not"),
    ],
)  # fmt: skip
def test_a_static_form_that_is_not_this_step_is_refused(
    script: Path, lab_names: None, options: dict[str, object], words: str
) -> None:
    with pytest.raises(UsageError, match=words):
        run_in_step.build(
            _args(script, **options), TorchrunFlags(), STEP, run_in_step.StepFacts(STEP)
        )
