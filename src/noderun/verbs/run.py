"""``noderun run``: launch a script on N simulated nodes of this machine."""

from __future__ import annotations

import argparse
import dataclasses
import os
import socket
import sys
from pathlib import Path

from noderun import disk_room, group_watch, notify, rundir, secret_env, timeline
from noderun.backends import ssh
from noderun.backends.local import LocalBackend, tail
from noderun.backends.ports import free_port, require_free_port
from noderun.backends.result import Result
from noderun.backends.supervise import Policy, supervise
from noderun.outcome import Outcome
from noderun.plan import LaunchPlan
from noderun.plan.run import RunRequest, Where
from noderun.verbs import run_in_step, run_modes, run_slurm, run_ssh
from noderun.verbs.launch_json import JSON_OPTION
from noderun.verbs.options import (
    NOTIFY_OPTION,
    SCRIPT_ARGUMENTS,
    STALL_OPTIONS,
    OptionTable,
    from_torchrun,
    port_number,
    stall_policy,
    switch,
    value,
)
from noderun.verbs.profiling import PROFILE_OPTION, profile_env, report_profile
from noderun.verbs.torchrun_flags import (
    NPROC_WORDS,
    TORCHRUN_OPTIONS,
    TorchrunFlags,
    check_program,
    endpoint_port,
    hand_started_master,
    local_cpus,
    local_gpus,
    nnodes_for,
    nnodes_spec,
    nproc_spec,
    read_flags,
    run_dir_for,
)

NPROC_OPTION = from_torchrun(
    value(
        "--nproc-per-node",
        type=nproc_spec,
        default=1,
        help="processes per node: a number, or gpu (visible GPUs), cpu (usable CPUs), auto (GPUs "
        "if any, else CPUs), as torchrun",
    )
)
OPTIONS = OptionTable(
    "run",
    (
        from_torchrun(
            value(
                "--nnodes",
                "--nodes",
                type=nnodes_spec,
                help="nodes (default 1; inside SLURM: all allocated); --nodes is the same option",
            )
        ),
        NPROC_OPTION,
        value("--run-dir", type=Path, help="run directory (default runs/<name>-…)"),
        from_torchrun(
            value("--master-port", type=port_number, help="rendezvous port (default: free)")
        ),
        *STALL_OPTIONS,
        NOTIFY_OPTION,
        PROFILE_OPTION,
        *run_slurm.ALLOCATION_OPTIONS,
        *run_ssh.OPTIONS,
        from_torchrun(
            value(
                "--node-rank",
                type=int,
                help="this machine's node of a job started by hand on every machine (with "
                "--nnodes and --master-addr, as torchrun)",
            )
        ),
        from_torchrun(
            value("--master-addr", help="node 0's address, for nodes started by hand (--node-rank)")
        ),
        *TORCHRUN_OPTIONS,
        switch("--dry-run", help="print the plan, start nothing"),
        JSON_OPTION,
        *SCRIPT_ARGUMENTS,
    ),
    help="launch a script on N nodes: simulated on this machine, or a SLURM allocation's",
    description="Launch SCRIPT as a multi-node job: one torchrun agent per node, "
    "P processes each, one rendezvous. Arguments after SCRIPT go to the script.",
)


def run_request(args: argparse.Namespace, flags: TorchrunFlags, attempt: int = 0) -> RunRequest:
    """Ask the world what the plan needs (the program, CPU/GPU counts, the run directory, a
    free port) and return it as a request; UsageError with the fix before anything starts."""
    program = check_program(args.script, flags.entry)
    nnodes = nnodes_for(args, flags) or 1
    spec = args.nproc_per_node
    gpus = local_gpus() if spec in NPROC_WORDS and spec != "cpu" else None
    run_dir = run_dir_for(args, flags)
    if attempt == 0:
        rundir.reuse_or_refuse(run_dir)  # a stopped run continues in place; others are refused
    request = RunRequest(
        where=Where.LOCAL,
        program=program,
        run_dir=run_dir,
        nproc_per_node=spec,
        script_args=tuple(args.script_args),
        entry=flags.entry,
        nnodes=nnodes,
        env=tuple(getattr(args, "env", None) or ()),  # --env K=V, for every rank
        cpus=local_cpus(),
        gpus=gpus,
        run_id=flags.run_id,
        max_restarts=flags.max_restarts,
        attempt=attempt,
        agent_flags=flags.agent_flags,
    )
    if args.node_rank is not None or args.master_addr:  # this machine's node only
        master_addr, master_port = hand_started_master(flags, args.master_addr, args.master_port)
        return dataclasses.replace(
            request,
            where=Where.BY_HAND,
            run_dir=run_dir.absolute(),
            node_rank=args.node_rank,
            master_addr=master_addr,
            master_port=master_port,
            join_timeout=flags.join_timeout or args.join_timeout,
            host=socket.gethostname(),
        )
    names = ("localhost", "127.0.0.1", socket.gethostname())
    asked = endpoint_port(flags, "127.0.0.1", names, args.master_port)
    port = require_free_port(asked) if asked else free_port()
    return dataclasses.replace(request, master_port=port)


def main(args: argparse.Namespace) -> int:
    flags = read_flags(args)
    run_modes.refuse_other_ways(args, os.environ)  # an option for another way: refused
    os.environ.update(profile_env(args))  # every rank inherits it, locally and through srun
    over_ssh = run_ssh.wanted(args)
    if run_in_step.wanted(args, os.environ):  # `srun noderun run`: one node of the step's job
        return run_in_step.main(args, flags, os.environ)
    if not over_ssh and run_slurm.inside_allocation(os.environ):  # sbatch or salloc: srun
        return run_slurm.main(args, flags=flags)
    plan = _plan(args, flags)
    run_dir = args.run_dir = plan.run_dir  # a restart continues in the same run directory
    if args.dry_run:
        print(plan)
        return 0
    backend = _backend(plan, args, flags)
    record = backend.describe()
    previous = rundir.reuse_or_refuse(run_dir)
    if previous is not None:
        record = previous.continued_by(record)
        print(
            f"noderun: continuing the {previous.status} run in {run_dir} "
            f"(attempt {len(record.attempts) + 1}); the script resumes if it is given "
            "--resume auto",
            flush=True,
        )
    if short := disk_room.shortfall(run_dir):
        print(f"noderun: warning: {short}", file=sys.stderr, flush=True)
    notify.export_targets(args.notify, os.environ)  # a preempted rank's requeue tells them
    rundir.take_lock(run_dir)
    try:
        done = supervise(
            backend,
            Policy(flags.max_restarts, stall_policy(args)),
            record,
            relaunch=lambda attempt: _backend(_plan(args, flags, attempt), args, flags),
            since=timeline.process_start(),
        )
        report_profile(run_dir, args)
        _report(run_dir, done.result, done.outcome)
        notify.notify_run(args.notify, run_dir)
        if done.record_error is not None:
            raise done.record_error  # one line naming run.json and the errno (cli)
        return group_watch.report(run_dir, plan.world_size, plan.nnodes, done.outcome.exit_code)
    finally:
        rundir.release_lock(run_dir)
        if over_ssh:
            ssh.close_connections([node.host for node in plan.nodes], args.ssh_config)


def _plan(args: argparse.Namespace, flags: TorchrunFlags, attempt: int = 0) -> LaunchPlan:
    """Simulated nodes here, the node started here by hand, or one node per host over SSH."""
    if run_ssh.wanted(args):
        return run_ssh.build_plan(args, flags, attempt)
    return run_request(args, flags, attempt).launch_plan()


def _backend(plan: LaunchPlan, args: argparse.Namespace, flags: TorchrunFlags) -> LocalBackend:
    command = secret_env.masked_argv(sys.argv)  # never a secret in run.json
    if run_ssh.wanted(args):
        return ssh.SshBackend(plan, command, args.ssh_config, flags.shown)
    return LocalBackend(plan, command, flags.shown)


def _report(run_dir: Path, result: Result, outcome: Outcome) -> None:
    failure = result.failure
    agent_failed = failure is not None and failure.rank is None  # not one of its ranks
    if outcome.status in ("failed", "bad-input") and agent_failed and outcome.log is not None:
        for line in tail(outcome.log, 15):  # an agent failed (or refused its input): its words
            print(f"  {line}", file=sys.stderr)
    done = outcome.status == "completed"
    print(outcome.final_line(run_dir), file=sys.stdout if done else sys.stderr, flush=True)
