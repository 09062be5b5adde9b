"""A job's stacks as one Snapshot: on this machine, or on every node of a SLURM job.

On SLURM, ``srun --overlap --jobid J`` runs ``python -m noderun.stacks.node`` once per node
of the running job; each dumps the ranks of its own node and prints one JSON line per rank.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Sequence
from pathlib import Path

from noderun import rundir
from noderun.errors import NoderunError, UsageError
from noderun.srun_lines import read_marked
from noderun.stacks import capture
from noderun.stacks.analysis import Snapshot
from noderun.stacks.model import RankStack
from noderun.stacks.node import MARKER

SRUN_TIMEOUT = 120.0


def world_size_of(run_dir: Path | str | None) -> int | None:
    """The run's world size from its run.json (None when unknown)."""
    if run_dir is None:
        return None
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        return int(rundir.read_json(Path(run_dir) / rundir.RUN_JSON)["topology"]["world_size"])
    return None


def local_snapshot(
    run_dir: Path, roots: Sequence[int] | None = None, world_size: int | None = None
) -> Snapshot:
    """Stacks of the ranks of ``run_dir`` that run on this machine."""
    ranks = capture.find_ranks(run_dir=run_dir, roots=roots)
    stacks, notes = capture.take(ranks, capture.py_spy_path())
    size = world_size if world_size is not None else world_size_of(run_dir)
    return Snapshot(tuple(stacks), size, tuple(notes))


def job_snapshot(job_id: str, run_dir: Path | None = None, nodes: Sequence[str] = ()) -> Snapshot:
    """Stacks of every rank of running SLURM job ``job_id``, one helper task per node."""
    from noderun.backends import slurm
    from noderun.backends.slurm import hostnames

    if not nodes:
        state = slurm.job_state(job_id)
        if state is None or state.status != "running":
            status = "unknown to SLURM" if state is None else f"{state.state}"
            raise UsageError(
                f"job {job_id} is not running ({status}): it has no stacks to take",
                "pass the id of a running job (squeue), or `noderun explain` for an ended one",
            )
        nodes = hostnames(state.nodes)
    argv = [sys.executable, "-m", "noderun.stacks.node", f"--job={job_id}"]
    if run_dir is not None:
        argv.append(f"--run-dir={run_dir}")
    py_spy = capture.py_spy_path()
    if py_spy:
        argv.append(f"--py-spy={py_spy}")
    lines, error = slurm.run_on_job_nodes(job_id, nodes, argv, timeout=SRUN_TIMEOUT)
    stacks: list[RankStack] = []
    notes: list[str] = []
    run_dirs: set[str] = set()
    for item in read_marked("\n".join(text for _task, text in lines), MARKER):
        with contextlib.suppress(ValueError, KeyError, TypeError):
            if "stack" in item:
                stacks.append(RankStack.from_dict(item["stack"]))
                run_dirs.add(str(item.get("run_dir", "")))
            elif "note" in item and item["note"] not in notes:
                notes.append(str(item["note"]))
    if not lines and error:
        raise NoderunError(
            f"cannot reach the nodes of job {job_id}: {error}",
            "run `noderun stacks` where srun works (a login node of the cluster)",
        )
    if error:
        notes.append(f"srun: {error}")
    size = world_size_of(run_dir or (next(iter(run_dirs)) if len(run_dirs) == 1 else None))
    return Snapshot(tuple(sorted(stacks, key=lambda s: s.rank)), size, tuple(notes))
