"""Site topology, the site command and capacity checks: pure functions, environ dicts in."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from noderun.errors import UsageError
from noderun.flare.site_launch import RANK_ENTRY, local_environ, run_argv
from noderun.flare.sites import Site, capacity_problem, site_table

LAB_2x2 = {  # an sbatch -N2 --ntasks-per-node=2 job on the lab, as the batch script sees it
    "SLURM_JOB_ID": "41",
    "SLURM_JOB_NUM_NODES": "2",
    "SLURM_JOB_NODELIST": "node[1-2]",
    "SLURM_JOB_CPUS_PER_NODE": "2(x2)",
}


def test_command_is_a_noderun_site_launch_that_flare_can_split() -> None:
    site = Site("site-1", nnodes=2, nproc_per_node=2, launcher="slurm")
    argv = shlex.split(site.command(python="/opt/venv with space/bin/python"))
    assert argv == [
        "/opt/venv with space/bin/python",
        "-u",
        "-m",
        "noderun.flare.site_launch",
        "--site",
        "site-1",
        "--launcher",
        "slurm",
        "--nnodes",
        "2",
        "--nproc-per-node",
        "2",
    ]


def test_table_one_line_per_site() -> None:
    table = site_table(
        [Site("site-1", 2, 2, args="--site site-1"), Site("site-2", script="b.py")], "a.py"
    )
    lines = table.splitlines()
    assert lines[0].split() == [
        "site",
        "launcher",
        "nodes",
        "x",
        "procs",
        "ranks",
        "script",
        "args",
    ]
    assert lines[1].split() == ["site-1", "local", "2", "x", "2", "4", "a.py", "--site", "site-1"]
    assert lines[2].split() == ["site-2", "local", "1", "x", "1", "1", "b.py"]


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"name": "Site 1"}, "not a FLARE site name"),
        ({"nnodes": 0}, "nnodes=0"),
        ({"nproc_per_node": -1}, "nproc_per_node=-1"),
        ({"launcher": "ssh"}, "valid: local, slurm"),
    ],
)
def test_bad_site_is_one_line(kwargs: dict[str, object], needle: str) -> None:
    with pytest.raises(UsageError) as err:
        Site(**{"name": "site-1", **kwargs})  # type: ignore[arg-type]
    assert needle in str(err.value) and "\n" not in str(err.value) and "hint:" in str(err.value)


@pytest.mark.parametrize(
    ("site", "environ", "cpus", "gpus", "needle"),
    [
        (Site("s", 1, 3), {}, 2, 0, "3 processes per node but a node here has 2 CPU cores"),
        (Site("s", 1, 2), {}, 16, 1, "has 1 GPUs"),
        (Site("s", 2, 1, "slurm"), {}, 2, 0, "not inside a SLURM allocation"),
        (Site("s", 3, 1, "slurm"), LAB_2x2, 2, 0, "asks for 3 nodes but SLURM job 41 has 2"),
        (Site("s", 2, 4, "slurm"), LAB_2x2, 2, 0, "4 processes per node but SLURM job 41 has 2"),
    ],
)
def test_more_ranks_than_the_site_has(
    site: Site, environ: dict[str, str], cpus: int, gpus: int, needle: str
) -> None:
    problem = capacity_problem(site, environ, cpus, gpus)
    assert problem is not None and needle in str(problem), problem


@pytest.mark.parametrize(
    ("site", "environ", "cpus", "gpus"),
    [
        (Site("s", 2, 2), {}, 2, 0),  # simulated nodes: 2 per node on 2 cores
        (Site("s", 1, 4), {}, 2, 4),  # GPUs, not cores, bound a GPU node
        (Site("s", 2, 2, "slurm"), LAB_2x2, 1, 0),  # the allocation, not this machine, counts
    ],
)
def test_site_that_fits(site: Site, environ: dict[str, str], cpus: int, gpus: int) -> None:
    assert capacity_problem(site, environ, cpus, gpus) is None


def test_run_argv_starts_ranks_through_the_rank_entry(tmp_path: Path) -> None:
    argv = run_argv(Site("site-1", 2, 2), "custom/train.py", ["--lr", "0.1"], tmp_path)
    assert argv == [
        "run",
        "--nnodes",
        "2",
        "--nproc-per-node",
        "2",
        "--run-dir",
        str(tmp_path),
        str(RANK_ENTRY),
        "custom/train.py",
        "--lr",
        "0.1",
    ]
    assert RANK_ENTRY.is_file()


def test_local_site_drops_the_allocation_around_it() -> None:
    assert local_environ({**LAB_2x2, "SLURMD_NODENAME": "node1", "PATH": "/bin"}) == {
        "PATH": "/bin"
    }
