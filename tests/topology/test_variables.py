"""One strict reader of launcher variables: a malformed value is the same one line in the
rank's Topology, in the node entry's NodeSpec and from ``python -m noderun.node``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from noderun.errors import InconsistentTopologyError
from noderun.topology import Topology
from noderun.topology.node_spec import LaunchMode, NodeSpec
from noderun.topology.variables import read_int

STEP = {
    "SLURM_JOB_ID": "4242",
    "SLURM_STEP_ID": "0",
    "SLURM_STEP_NODELIST": "node[1-2]",
    "SLURM_JOB_NODELIST": "node[1-2]",
    "SLURM_STEP_NUM_NODES": "2",
    "SLURM_NNODES": "2",
    "SLURM_STEP_NUM_TASKS": "4",
    "SLURM_NTASKS": "4",
    "SLURM_STEP_TASKS_PER_NODE": "2(x2)",
    "SLURM_NODEID": "1",
    "SLURM_PROCID": "3",
    "SLURM_LOCALID": "1",
}
MALFORMED = [("SLURM_PROCID", "3x"), ("SLURM_NODEID", "one"), ("SLURM_LOCALID", "1.0")]


def _spec(environ: dict[str, str]) -> NodeSpec:
    return NodeSpec.from_env(
        environ, mode=LaunchMode.SRUN, nproc_per_node=2, run_dir=Path("r"), join_timeout=5.0
    )


def test_read_int_takes_the_first_set_name_and_skips_empty_ones() -> None:
    assert read_int({"A": "", "B": " 7 "}, "A", "B") == 7
    assert read_int({}, "A") is None
    assert read_int({"A": "-1"}, "A") == -1  # the range is the caller's to judge


@pytest.mark.parametrize(("name", "value"), MALFORMED)
def test_a_malformed_variable_is_the_same_one_line_in_both_readers(name: str, value: str) -> None:
    environ = {**STEP, name: value}
    with pytest.raises(InconsistentTopologyError) as by_rank:
        Topology.from_env(environ)
    with pytest.raises(InconsistentTopologyError) as by_node:
        _spec(environ)
    said = f"{name}={value!r} is not an integer; hint: unset {name} or set it to a number"
    assert str(by_rank.value) == str(by_node.value) == said


def test_the_well_formed_step_reads_the_same_in_both() -> None:
    topo, spec = Topology.from_env(STEP), _spec(STEP)
    assert (topo.rank, topo.local_rank, topo.node_rank) == (3, 1, 1)
    assert (spec.index, spec.local_rank, spec.node_rank) == (3, 1, 1)


def test_the_node_entry_says_it_in_one_line_and_exits_2(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "NODERUN_"))}
    env.update(STEP, SLURM_PROCID="x3")
    result = subprocess.run(
        [sys.executable, "-m", "noderun.node", "--mode=srun", "--nproc-per-node=2",
         "--master-port=29999", f"--run-dir={tmp_path}", "--", "train.py"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "noderun.node: error: SLURM_PROCID='x3' is not an integer; hint: unset SLURM_PROCID or "
        "set it to a number"
    ]
