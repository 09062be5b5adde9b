"""``noderun sweep --submit``: the points still to run as one SLURM job array, followed to the end.

Task i runs point i (its index in the whole grid, so a re-run's smaller array keeps the ids);
each task is requeueable on its own. sweep.json in the sweep directory names the last array:
a re-run while it still runs follows it instead of submitting the points twice.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from noderun import rundir
from noderun.backends import slurm
from noderun.errors import NoderunError, UsageError
from noderun.plan.array import ArrayPlan, array_plan
from noderun.plan.sbatch import SbatchPlan, SubmitRequest
from noderun.sweep.grid import Point, point_args
from noderun.topology.contract import job_token
from noderun.verbs.submit import check_cluster, write_job

SWEEP_JSON = "sweep.json"
ARRAY_SCRIPT = "array.sbatch"


def check_size(points: int) -> None:
    """Before anything is written: sbatch is there and the grid fits MaxArraySize."""
    slurm.require_command("sbatch")
    size = slurm.max_array_size()
    if size is not None and points > size:
        raise UsageError(
            f"the sweep has {points} points but this cluster's MaxArraySize is {size} "
            f"(array task ids 0-{size - 1})",
            f"sweep at most {size} points per --out (fewer --param values), or ask the "
            "admins to raise MaxArraySize",
        )


def point_plan(args: argparse.Namespace, script: Path, out: Path, point: Point) -> SbatchPlan:
    """The point's job, as ``noderun submit`` renders it (requeueable)."""
    return SubmitRequest(
        script=str(script),
        run_dir=out / point.name,
        workdir=Path.cwd(),
        script_args=tuple(point_args(args.script_args, point)),
        nodes=args.nnodes,
        nproc_per_node=args.nproc_per_node,
        partition=args.partition,
        account=args.account,
        time=args.time,
        qos=args.qos,
        env=tuple(args.env),
        setup=args.setup,
        requeue=True,
        signal=args.signal,
        python=sys.executable,
        job_name=f"sweep-{script.stem}",
        run_flags=tuple(f"--notify={t}" for t in args.notify),
    ).materialize()


def submit(
    args: argparse.Namespace,
    script: Path,
    out: Path,
    points: Sequence[Point],
    todo: Sequence[Point],
) -> dict[str, str]:
    """Submit (or find the live array of) the points in ``todo``, follow every task; point
    name -> its task's job id (``<array>_<task>``)."""
    running = _live_array(out)
    if running is not None:
        job, tasks = running
        print(f"noderun: the sweep's job array {job} still runs; following it", flush=True)
    elif todo:
        job, tasks = _submit(args, script, out, todo)
    else:
        return {}
    _follow(job, tasks)
    return {name: f"{job}_{index}" for index, name in tasks.items()}


def _submit(
    args: argparse.Namespace, script: Path, out: Path, todo: Sequence[Point]
) -> tuple[str, dict[int, str]]:
    for point in todo:  # a point whose job still runs is never submitted twice
        rundir.reuse_or_refuse(out / point.name, slurm.job_alive)
    plans = [(p.index, point_plan(args, script, out, p)) for p in todo]
    array = array_plan(plans, args.max_parallel, out, f"sweep-{script.stem}")
    check_cluster(plans[0][1].request)
    slurm.sbatch_test(str(array))  # a job SLURM would refuse: one line, nothing written
    created = [plan.request.run_dir for _, plan in plans if not plan.request.run_dir.exists()]
    os.environ.update(job_token(os.environ))  # sbatch hands it to every task: its gate's token
    try:
        for _, plan in plans:
            write_job(plan)  # the point's own job.sbatch and its `submitted` run.json
        job = slurm.sbatch(_write_array(out, array))
    except BaseException:
        for run_dir in created:  # nothing half-written: the new run directories go
            shutil.rmtree(run_dir, ignore_errors=True)
        raise
    tasks = {index: plan.request.run_dir.name for index, plan in plans}
    rundir.write_json_atomic(out / SWEEP_JSON, {"job_id": job, "tasks": tasks})
    print(f"noderun: submitted job array {job} ({len(tasks)} point(s), --array="
          f"{array.array_spec}); sweep dir {out}", flush=True)  # fmt: skip
    return job, tasks


def _write_array(out: Path, array: ArrayPlan) -> Path:
    (out / "logs").mkdir(parents=True, exist_ok=True)
    path = out / ARRAY_SCRIPT
    path.write_text(str(array))
    return path


def _live_array(out: Path) -> tuple[str, dict[int, str]] | None:
    """The array sweep.json names, when any of its tasks has not ended."""
    try:
        data = rundir.read_json(out / SWEEP_JSON)
    except (OSError, ValueError):
        return None
    job, tasks = str(data.get("job_id") or ""), data.get("tasks") or {}
    if not job or not isinstance(tasks, dict):
        return None
    ids = {int(i): str(name) for i, name in tasks.items()}
    alive = any(slurm.job_alive(f"{job}_{i}") for i in ids)
    return (job, ids) if alive else None


def _follow(job: str, tasks: dict[int, str]) -> None:
    """Wait until every task has ended, printing each state change (RUNNING, REQUEUED, …);
    another pass while any task is alive again (a requeued task comes back)."""
    try:
        while True:
            for index, name in sorted(tasks.items()):
                _wait_task(f"{job}_{index}", name)
            if not any(slurm.job_alive(f"{job}_{index}") for index in tasks):
                return
    except KeyboardInterrupt:
        print(
            f"noderun: stopped following job array {job}; it keeps running (`scancel {job}` "
            "stops it); run the same command again to follow it and get the table",
            file=sys.stderr,
        )
        raise


def _wait_task(task: str, name: str) -> None:
    def changed(state: slurm.JobState) -> None:
        print(f"noderun: task {task} ({name}) {state.state}", flush=True)

    try:
        slurm.wait_for_job(task, on_change=changed, poll=0.5)
    except NoderunError as err:  # forgotten by SLURM: its run.json says what it knew
        print(f"noderun: warning: {err}", file=sys.stderr, flush=True)
