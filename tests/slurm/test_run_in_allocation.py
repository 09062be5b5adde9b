"""`noderun run` inside an allocation, before anything starts: detection, the step it plans,
and the mistakes it refuses. Fake allocation variables, no lab needed."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from noderun.errors import UsageError
from noderun.plan.slurm import LaunchMode
from noderun.verbs import run_slurm

BATCH = {
    "SLURM_JOB_ID": "77",
    "SLURM_JOB_NODELIST": "node[1-3]",
    "SLURM_JOB_CPUS_PER_NODE": "2(x3)",
    "SLURMD_NODENAME": "node1",
}


def _args(path: Path, **options: object) -> argparse.Namespace:
    values: dict[str, object] = {
        "script": str(path),
        "script_args": ["--epochs", "1"],
        "nnodes": None,
        "nproc_per_node": 2,
        "run_dir": path.parent / "run",
        "master_port": None,
        "master_addr": None,
        "mode": LaunchMode.TORCHRUN,
        "join_timeout": 20.0,
        "dry_run": False,
    }
    values.update(options)
    return argparse.Namespace(**values)


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "train.py"
    path.write_text("")
    return path


@pytest.mark.parametrize(
    ("environ", "inside"),
    [
        (BATCH, True),
        ({"SLURM_JOB_ID": "77"}, True),  # salloc shell
        ({**BATCH, "SLURM_STEP_ID": "0"}, False),  # already inside srun
        ({}, False),
    ],
)
def test_allocation_is_detected(environ: dict[str, str], inside: bool) -> None:
    assert run_slurm.inside_allocation(environ) is inside


def test_defaults_to_every_allocated_node(script: Path) -> None:
    step = run_slurm.build_step(_args(script), BATCH)
    assert (step.nnodes, step.hosts, step.nodelist) == (3, ("node1", "node2", "node3"), None)
    assert step.script_args == ("--epochs", "1")
    srun = step.srun_argv()
    assert srun[:7] == [
        "srun",
        "--nodes=3",
        "--ntasks=3",
        "--ntasks-per-node=1",
        "--kill-on-bad-exit=1",
        "--wait=30",
        "--label",
    ]
    assert srun[-3:] == [str(script), "--epochs", "1"]


def test_fewer_nodes_pins_the_node_list(script: Path) -> None:
    step = run_slurm.build_step(_args(script, nnodes=2, mode=LaunchMode.SRUN), BATCH)
    assert step.nodelist == "node1,node2"
    assert "--ntasks=4" in step.srun_argv() and "--ntasks-per-node=2" in step.srun_argv()


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"nnodes": 4}, ["--nnodes 4 but job 77 has 3 node(s)", "--nodes=4"]),
        (
            {"mode": LaunchMode.SRUN, "nproc_per_node": 3},
            ["srun mode needs that many CPUs", "--ntasks-per-node=3"],
        ),
        ({"script": "missing.py"}, ["'missing.py' not found"]),
    ],
)
def test_mistakes_are_refused(script: Path, options: dict[str, object], words: list[str]) -> None:
    with pytest.raises(UsageError) as err:
        run_slurm.build_step(_args(script, **options), BATCH)
    for word in words:
        assert word in str(err.value)


def test_run_dir_of_another_run_is_refused_but_submit_requeue_and_a_stopped_run_are_not(
    script: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As `noderun run` locally: a stopped run of another job continues in place; a completed
    one, or one whose job SLURM still runs, is refused in one line."""
    run_dir = script.parent / "run"
    run_dir.mkdir()
    run_json = run_dir / "run.json"
    monkeypatch.setattr(run_slurm.slurm, "job_alive", lambda job: job == "13")
    for record, refusal in [
        ({"status": "submitted"}, None),  # written by noderun submit before sbatch
        ({"status": "failed", "job_id": "77"}, None),  # this job, requeued
        ({"status": "cancelled", "job_id": "12"}, None),  # another job's, ended: continued
        ({"status": "completed", "job_id": "12"}, "holds a completed run"),
        ({"status": "preempted", "job_id": "13"}, "belongs to SLURM job 13, which has not ended"),
    ]:
        run_json.write_text(json.dumps(record))
        if refusal is None:
            assert run_slurm.build_step(_args(script), BATCH).run_dir == run_dir
        else:
            with pytest.raises(UsageError, match=refusal):
                run_slurm.build_step(_args(script), BATCH)


def test_one_node_runs_torchrun_directly_only_on_that_node(script: Path) -> None:
    one = {**BATCH, "SLURM_JOB_NODELIST": "node2", "SLURMD_NODENAME": "node2"}
    assert run_slurm.build_step(_args(script), one).direct
    salloc_shell = {k: v for k, v in one.items() if k != "SLURMD_NODENAME"}
    assert not run_slurm.build_step(_args(script), salloc_shell).direct
