"""``noderun run`` inside a SLURM allocation (sbatch or salloc): one srun step over the nodes.

More than one node, srun mode, or a shell that is not on an allocated node (salloc): srun +
``python -m noderun.node``. One node in torchrun mode from the batch script: torchrun directly.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import signal
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

from noderun import group_watch, notify, rundir, secret_env, timeline
from noderun.backends import slurm
from noderun.backends.slurm import hostnames, scancel, write_sacct_summary
from noderun.backends.slurm_step import StepBackend
from noderun.backends.supervise import Policy, Supervised, supervise
from noderun.plan.run import RunRequest, Where, slurm_step
from noderun.plan.slurm import DEFAULT_JOIN_TIMEOUT, LaunchMode, StepPlan
from noderun.run_record import FOLLOW_STOPPED, RunRecord, versions
from noderun.topology import in_slurm_allocation, slurm_job_id, tasks_per_node
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


def _run_dir(run_dir: Path, job_ids: tuple[str, ...]) -> Path:
    """``run_dir``: new, written by `noderun submit` before sbatch, this job's own (requeued), or
    another job's run that stopped (preempted, cancelled, failed: continued in place, as
    locally); a completed run or one of a job still alive is refused in one line."""
    previous = rundir.read_record(run_dir)
    if previous is not None and previous.status != "submitted" and previous.job_id not in job_ids:
        rundir.reuse_or_refuse(run_dir, slurm.job_alive)
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
        env=tuple(getattr(args, "env", None) or ()),
        run_id=flags.run_id,
        join_timeout=flags.join_timeout or args.join_timeout,
        max_restarts=flags.max_restarts,
        attempt=attempt,
        agent_flags=flags.agent_flags,
    )
    request.check()  # the nodes and CPUs asked for exist, before the GPUs are counted
    node0 = allocated[0] if allocated else "localhost"
    return slurm_step(
        dataclasses.replace(
            request,
            gpus=_gpus(args.nproc_per_node, environ, on_node),
            run_dir=_run_dir(request.run_dir, (job_id, slurm_job_id(environ))),
            master_port=endpoint_port(flags, node0, (), args.master_port, args.master_addr),
            on_node=on_node,
        )
    )


def main(
    args: argparse.Namespace,
    environ: Mapping[str, str] | None = None,
    flags: TorchrunFlags | None = None,
) -> int:
    env = os.environ if environ is None else environ
    flags = flags or TorchrunFlags()
    step = build_step(args, env, flags)
    args.run_dir = step.run_dir  # a restart continues in the same run directory
    if args.dry_run:
        print(step)
        return 0
    notify.export_targets(getattr(args, "notify", ()), os.environ)  # for a requeued rank's
    found: dict[str, str] = {}  # importlib.metadata is slow: looked up while the step runs
    lookup = threading.Thread(target=lambda: found.update(versions()), daemon=True)
    lookup.start()

    def backend(step: StepPlan) -> StepBackend:
        return StepBackend(
            step,
            env["SLURM_JOB_ID"],
            secret_env.masked_argv(sys.argv),
            show=flags.shown,
            restart_count=int(env.get("SLURM_RESTART_COUNT", "0") or 0),
            known_as=slurm_job_id(env),
        )

    first = backend(step)
    done = supervise(
        first,
        Policy(flags.max_restarts, stall_policy(args)),
        first.describe(),
        relaunch=lambda attempt: backend(build_step(args, env, flags, attempt)),
        since=timeline.process_start(),
    )
    lookup.join()
    return finish(done, step, env, found, getattr(args, "notify", ()), steps_run=not step.direct)


def finish(
    done: Supervised,
    step: StepPlan,
    env: Mapping[str, str],
    found: Mapping[str, str],
    notify_to: Sequence[str] = (),
    *,
    steps_run: bool,
    refused: bool = False,
) -> int:
    """After the step: run.json with the versions ``found``, SLURM's accounting (unless a
    `submit --wait` writes it after the job), the last line (exit 2 and none when the node
    entry ``refused`` the command line: its one line is out), and a cancelled job ended so."""
    record, outcome = done.record, done.outcome
    record.versions = dict(found) or versions()
    rundir.write_record(step.run_dir, record)
    if not _followed(step.run_dir, record):  # else `submit --wait` writes it after the job
        write_sacct_summary(step.run_dir, env["SLURM_JOB_ID"], job_final=False, steps_run=steps_run)
        timeline.stamp(step.run_dir, "accounting_written", "launcher")
    if refused:
        return 2
    ok = outcome.status == "completed"
    print(outcome.final_line(step.run_dir), file=sys.stdout if ok else sys.stderr, flush=True)
    notify.notify_run(notify_to, step.run_dir)
    if outcome.status == "cancelled":
        end_job_cancelled(slurm_job_id(env))
    if done.record_error is not None:
        raise done.record_error  # one line naming run.json and the errno (cli)
    return group_watch.report(step.run_dir, step.world_size, step.nnodes, outcome.exit_code)


def end_job_cancelled(job_id: str) -> None:
    """`noderun cancel` ended the run (every rank checkpointed): end the job CANCELLED, as
    run.json says, rather than FAILED by the launcher's exit code (`sacct`, `squeue`). Done
    here, by the job itself, so it holds whoever waits for the cancel (after --now the job is
    already cancelled: scancel of it again is harmless)."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # scancel's SIGTERM: we end on our own
    error = scancel(job_id)
    if error:
        print(f"noderun: warning: scancel {job_id} failed ({error}): SLURM may show the "
              "cancelled job as FAILED", file=sys.stderr, flush=True)  # fmt: skip


def _followed(run_dir: Path, record: RunRecord) -> bool:
    """A `submit --wait` follows this job and writes its accounting once the job ended: the
    record names it, it has not said it stopped (a timeline stage), and it is not known dead."""
    follower = record.follower
    if follower is None:
        return False
    stages = {row["stage"] for row in timeline.gather(run_dir, since=follower.since)}
    return FOLLOW_STOPPED not in stages and follower.alive()
