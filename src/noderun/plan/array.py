"""A sweep as one SLURM job array, pure: task i runs point i as a multi-node job of its own.

Every point's job is rendered as ``noderun submit`` would render it (``SbatchPlan``); the array
script takes the first point's ``#SBATCH`` options (the points differ only in their script
arguments and run directory), adds ``--array=I,J…%P`` and ``--requeue``, and dispatches on
``$SLURM_ARRAY_TASK_ID``. Each task has its own ``SLURM_JOB_ID``: a preempted task requeues
itself (``scontrol requeue $SLURM_JOB_ID``) and no other.
"""

from __future__ import annotations

import dataclasses
import shlex
from collections.abc import Sequence
from pathlib import Path

from noderun.plan.sbatch import SbatchPlan

_DROPPED = ("#SBATCH --job-name=", "#SBATCH --output=", "#SBATCH --requeue", "#SBATCH --open-mode=")


@dataclasses.dataclass(frozen=True)
class ArrayPlan:
    """``str(plan)`` is the array's sbatch script; ``tasks`` maps task id -> point's plan."""

    tasks: tuple[tuple[int, SbatchPlan], ...]
    max_parallel: int
    out: Path
    job_name: str

    @property
    def array_spec(self) -> str:
        """'0-2%2' for a whole grid, '1,4%2' for the points a re-run still has to run."""
        ids = [i for i, _ in self.tasks]
        spread = f"{ids[0]}-{ids[-1]}" if ids == list(range(ids[0], ids[-1] + 1)) else None
        spec = spread if spread and len(ids) > 1 else ",".join(map(str, ids))
        return f"{spec}%{self.max_parallel}"

    def __str__(self) -> str:
        first = self.tasks[0][1]
        req = first.request
        directives = [d for d in first.directives() if not d.startswith(_DROPPED)]
        lines = [
            "#!/bin/bash",
            f"# noderun sweep: {len(self.tasks)} point(s), each {req.nodes} node(s) x "
            f"{req.nproc_per_node} = {first.step.world_size} ranks, {req.mode.value} mode",
            f"#SBATCH --job-name={self.job_name}",
            *directives,
            f"#SBATCH --array={self.array_spec}",
            f"#SBATCH --output={self.out / 'logs' / 'array-%A_%a.out'}",
            "#SBATCH --requeue",
            "#SBATCH --open-mode=append",
            "set -eo pipefail",
        ]
        if req.setup:
            lines += ["# --setup, run as given:", req.setup]
        lines += [f"export {key}={shlex.quote(value)}" for key, value in req.env]
        lines.append('case "$SLURM_ARRAY_TASK_ID" in')
        for index, plan in self.tasks:
            run_dir = plan.request.run_dir
            console = shlex.quote(str(run_dir / "logs")) + '/slurm-"$SLURM_JOB_ID".out'
            lines += [
                f"  {index})",
                f"    export NODERUN_RUN_DIR={shlex.quote(str(run_dir))}",
                f"    {shlex.join(['exec', *plan.run_argv()])} >>{console} 2>&1",
                "    ;;",
            ]
        lines += [
            "esac",
            'echo "noderun sweep: no point for array task $SLURM_ARRAY_TASK_ID" >&2',
            "exit 2",
        ]
        return "\n".join(lines) + "\n"


def array_plan(
    plans: Sequence[tuple[int, SbatchPlan]], max_parallel: int, out: Path, job_name: str
) -> ArrayPlan:
    if not plans:
        raise ValueError("a job array needs at least one point")
    return ArrayPlan(tuple(plans), max_parallel, out, job_name)
