"""``noderun run`` inside a SLURM allocation (sbatch or salloc): one srun step over the nodes.

More than one node, srun mode, or a shell that is not on an allocated node (salloc): srun +
``python -m noderun.node``. One node in torchrun mode from the batch script: torchrun directly.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path

from noderun import group_watch, rundir, timeline
from noderun.backends.local import LocalSupervisor
from noderun.backends.ports import require_free_port
from noderun.backends.slurm import hostnames, write_sacct_summary
from noderun.backends.slurm_step import StepSupervisor
from noderun.errors import UsageError
from noderun.outcome import Outcome, announce_restart, restart_refusal
from noderun.plan.launch import Gang, plan_local
from noderun.plan.run import RunRequest, Where
from noderun.plan.slurm import DEFAULT_JOIN_TIMEOUT, LaunchMode, StepPlan
from noderun.plan.stall import StallPolicy
from noderun.topology import in_slurm_allocation, port_for_job, tasks_per_node
from noderun.verbs.options import stall_policy, value
from noderun.verbs.torchrun_flags import (
    NPROC_WORDS,
    TorchrunFlags,
    check_program,
    endpoint_port,
    local_gpus,
    nnodes_for,
    run_dir_for,
)

# options that matter inside a SLURM allocation; `noderun run` lists them in its table
ALLOCATION_OPTIONS = (
    value(
        "--mode",
        type=LaunchMode,
        default=LaunchMode.TORCHRUN,
        help="inside SLURM: torchrun (one agent per node) or srun (one task per rank)",
    ),
    value(
        "--join-timeout",
        type=float,
        default=DEFAULT_JOIN_TIMEOUT,
        help="seconds for every node/rank to arrive before the job fails, naming the absent",
    ),
)


def inside_allocation(environ: Mapping[str, str]) -> bool:
    """In a batch script or an salloc shell, not inside an srun step."""
    return in_slurm_allocation(environ)


def _run_dir(run_dir: Path, job_id: str) -> Path:
    """``run_dir``, unless it holds another job's run (a requeued job comes back to its own)."""
    run_json = run_dir / rundir.RUN_JSON
    if run_json.exists():
        previous = rundir.read_json(run_json)
        # noderun submit wrote it before sbatch; a requeued job comes back to its own
        if previous.get("status") != "submitted" and str(previous.get("job_id")) != job_id:
            raise UsageError(
                f"run directory {run_dir} already holds a run", "pass a new --run-dir or remove it"
            )
    return run_dir


def _gpus(spec: int | str, environ: Mapping[str, str], on_node: bool) -> int | None:
    """GPUs per node for --nproc-per-node gpu/auto: SLURM's count for this job, else this
    node's (only when noderun runs on an allocated node)."""
    if isinstance(spec, int):
        return None
    gpus = environ.get("SLURM_GPUS_ON_NODE", "")
    if gpus.isdigit():
        return int(gpus)
    return local_gpus() if on_node and spec in NPROC_WORDS and spec != "cpu" else 0


def build_step(
    args: argparse.Namespace,
    environ: Mapping[str, str],
    flags: TorchrunFlags | None = None,
    attempt: int = 0,
) -> StepPlan:
    """Ask the allocation (nodes, CPUs, GPUs, the run directory), then materialize the
    request; UsageError with the fix."""
    flags = flags or TorchrunFlags()
    job_id = environ["SLURM_JOB_ID"]
    program = check_program(args.script, flags.entry)
    allocated = hostnames(environ.get("SLURM_JOB_NODELIST", ""))
    on_node = environ.get("SLURMD_NODENAME", "") in allocated[:1]
    cpus = tasks_per_node(environ.get("SLURM_JOB_CPUS_PER_NODE", "") or "0")
    request = RunRequest(
        where=Where.SLURM,
        program=program,
        run_dir=run_dir_for(args, flags),
        nproc_per_node=args.nproc_per_node,
        script_args=tuple(args.script_args),
        entry=flags.entry,
        nnodes=nnodes_for(args, flags),
        cpus=min(cpus) if cpus else None,
        hosts=tuple(allocated),
        mode=LaunchMode(args.mode),
        job_id=job_id,
        run_id=flags.run_id,
        join_timeout=flags.join_timeout or args.join_timeout,
        max_restarts=flags.max_restarts,
        attempt=attempt,
    )
    request.check()  # the nodes and CPUs asked for exist, before the GPUs are counted
    node0 = allocated[0] if allocated else "localhost"
    return dataclasses.replace(
        request,
        gpus=_gpus(args.nproc_per_node, environ, on_node),
        run_dir=_run_dir(request.run_dir, job_id),
        master_port=endpoint_port(flags, node0, (), args.master_port),
    ).step()


def _on_allocated_node(environ: Mapping[str, str], step: StepPlan) -> bool:
    """A batch script runs on the first allocated node; an salloc shell usually does not."""
    return environ.get("SLURMD_NODENAME", "") in step.hosts[:1]


def _record(step: StepPlan, environ: Mapping[str, str], direct: bool) -> dict[str, object]:
    run_json = step.run_dir / rundir.RUN_JSON
    record = rundir.read_json(run_json) if run_json.exists() else {}
    record.update(
        {
            "command": sys.argv,
            "backend": "slurm",
            "mode": step.mode.value,
            "job_id": environ["SLURM_JOB_ID"],
            "restart_count": int(environ.get("SLURM_RESTART_COUNT", "0") or 0),
            "script": step.script,
            "script_args": list(step.script_args),
            "entry": step.entry.value,
            "topology": {
                "nnodes": step.nnodes,
                "nproc_per_node": step.nproc_per_node,
                "world_size": step.world_size,
                "master_addr": step.hosts[0],
                "master_port": step.master_port or port_for_job(environ["SLURM_JOB_ID"]),
            },
            "hosts": list(step.hosts),
            "launch": "torchrun" if direct else "srun",
            "step_command": None if direct else step.srun_argv(),
            "cwd": os.getcwd(),
            "status": "running",
            "start_time": rundir.now_iso(),
        }
    )
    return record


def _single_node(
    step: StepPlan, environ: Mapping[str, str], stall: StallPolicy, flags: TorchrunFlags
) -> Outcome:
    """One node, torchrun mode, already on it: torchrun directly, as ``noderun run`` locally."""
    port = step.master_port or port_for_job(environ["SLURM_JOB_ID"])
    gang = Gang(
        nnodes=1,
        nproc_per_node=step.nproc_per_node,
        master_addr="127.0.0.1",
        master_port=require_free_port(port),
        run_dir=step.run_dir,
        script=step.script,
        script_args=step.script_args,
        run_id=step.run_id or environ["SLURM_JOB_ID"],
        entry=step.entry,
    )
    plan = plan_local(gang, dict(step.env))
    return LocalSupervisor(plan, stall=stall, show=flags.shown).run().outcome(step.run_dir)


def main(
    args: argparse.Namespace,
    environ: Mapping[str, str] | None = None,
    flags: TorchrunFlags | None = None,
) -> int:
    env = os.environ if environ is None else environ
    flags = flags or TorchrunFlags()
    step = build_step(args, env, flags)
    args.run_dir = step.run_dir  # a restart continues in the same run directory
    direct = step.nnodes == 1 and step.mode is LaunchMode.TORCHRUN and _on_allocated_node(env, step)
    if args.dry_run:
        print(step.rank_table())
        print("torchrun directly on this node" if direct else " ".join(step.srun_argv()))
        return 0
    record = _record(step, env, direct)
    run_json = step.run_dir / rundir.RUN_JSON
    found: dict[str, str] = {}  # importlib.metadata is slow: looked up while the step runs
    lookup = threading.Thread(target=lambda: found.update(versions()), daemon=True)
    lookup.start()
    attempt, previous = 0, None
    while True:
        since = timeline.process_start() if attempt == 0 else None
        outcome = _attempt(args, flags, step, env, direct, record, since)
        refusal = restart_refusal(outcome, previous, attempt, flags.max_restarts)
        if refusal is not None:
            break
        attempt, previous = attempt + 1, outcome
        announce_restart(record, outcome, attempt, flags.max_restarts)
        rundir.write_json_atomic(run_json, record)
        step = build_step(args, env, flags, attempt)
        fresh = _record(step, env, direct)
        fresh["restart_count"] = attempt
        record = rundir.next_attempt(record, fresh)
    if flags.max_restarts and outcome.status != "completed":
        record["restart"] = f"not restarted: {refusal}"
    lookup.join()
    record["versions"] = found or versions()
    rundir.write_json_atomic(run_json, record)
    if not rundir.followed(step.run_dir):  # else `submit --wait` writes it once the job ended
        write_sacct_summary(
            step.run_dir, env["SLURM_JOB_ID"], job_final=False, steps_run=not direct
        )
        timeline.stamp(step.run_dir, "accounting_written", "launcher")
    done = outcome.status == "completed"
    print(outcome.final_line(step.run_dir), file=sys.stdout if done else sys.stderr, flush=True)
    return group_watch.report(step.run_dir, step.world_size, step.nnodes, outcome.exit_code)


def versions() -> dict[str, str]:
    """Python's, torch's and noderun's versions for run.json."""
    from importlib import metadata  # ~10 ms to import: in the lookup thread, not before srun

    return {
        "python": platform.python_version(),
        "torch": metadata.version("torch"),
        "noderun": metadata.version("noderun"),
    }


def _attempt(
    args: argparse.Namespace,
    flags: TorchrunFlags,
    step: StepPlan,
    env: Mapping[str, str],
    direct: bool,
    record: dict[str, object],
    since: float | None = None,
) -> Outcome:
    """Start the whole gang once and wait for it; ``record`` gets its outcome and timeline
    (stages from ``since``, default now)."""
    run_json = step.run_dir / rundir.RUN_JSON
    since = since or time.time()
    timeline.stamp(step.run_dir, "launcher_started", "launcher", at=since)
    rundir.write_json_atomic(run_json, record)
    (step.run_dir / "logs").mkdir(parents=True, exist_ok=True)
    for rank in range(step.world_size):  # one log per rank, even for a rank that prints nothing
        (step.run_dir / "logs" / f"rank{rank}.log").touch()
    print(
        f"noderun: SLURM job {env['SLURM_JOB_ID']}: {step.nnodes} node(s) x "
        f"{step.nproc_per_node} = {step.world_size} ranks ({step.mode.value} mode) on "
        f"{', '.join(step.hosts)}; run dir {step.run_dir}",
        flush=True,
    )
    stall = stall_policy(args)
    if direct:
        outcome = _single_node(step, env, stall, flags)
    else:
        supervisor = StepSupervisor(step, stall=stall, job_id=env["SLURM_JOB_ID"], show=flags.shown)
        result = supervisor.run()
        record["srun_exit_code"] = result.srun_exit_code
        outcome = result.outcome(step.run_dir)
    timeline.stamp(step.run_dir, "teardown_done", "launcher")
    record.update(outcome.record(rundir.now_iso()))
    record["timeline"] = timeline.gather(step.run_dir, since)
    return outcome
