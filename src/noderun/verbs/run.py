"""``noderun run``: launch a script on N simulated nodes of this machine."""

from __future__ import annotations

import argparse
import dataclasses
import os
import socket
import sys
import time
from pathlib import Path

from noderun import group_watch, rundir, timeline
from noderun.backends import ssh
from noderun.backends.local import LocalSupervisor, RunResult, tail
from noderun.backends.ports import free_port, require_free_port
from noderun.outcome import Outcome, announce_restart, restart_refusal
from noderun.plan import LaunchPlan
from noderun.plan.run import RunRequest, Where
from noderun.verbs import run_in_step, run_slurm, run_ssh
from noderun.verbs.options import (
    SCRIPT_ARGUMENTS,
    STALL_OPTIONS,
    OptionTable,
    add_verb,
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
    local_cpus,
    local_gpus,
    nnodes_for,
    nnodes_spec,
    nproc_spec,
    read_flags,
    run_dir_for,
)

NPROC_OPTION = value(
    "--nproc-per-node",
    "--nproc_per_node",
    type=nproc_spec,
    default=1,
    help="processes per node: a number, or gpu (visible GPUs), cpu (usable CPUs), auto (GPUs if "
    "any, else CPUs), as torchrun",
)
OPTIONS = OptionTable(
    "run",
    (
        value("--nnodes", type=nnodes_spec, help="nodes (default 1; inside SLURM: all allocated)"),
        NPROC_OPTION,
        value("--run-dir", type=Path, help="run directory (default runs/<name>-…)"),
        value(
            "--master-port",
            "--master_port",
            type=port_number,
            help="rendezvous port (default: free)",
        ),
        *STALL_OPTIONS,
        PROFILE_OPTION,
        *run_slurm.ALLOCATION_OPTIONS,
        *run_ssh.OPTIONS,
        value(
            "--node-rank",
            "--node_rank",
            type=int,
            help="this machine's node of a job started by hand on every machine (with "
            "--nnodes and --master-addr, as torchrun)",
        ),
        value(
            "--master-addr",
            "--master_addr",
            help="node 0's address, for nodes started by hand (--node-rank)",
        ),
        *TORCHRUN_OPTIONS,
        switch("--dry-run", help="print the plan, start nothing"),
        *SCRIPT_ARGUMENTS,
    ),
)


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    add_verb(
        sub,
        OPTIONS,
        main,
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
        cpus=local_cpus(),
        gpus=gpus,
        run_id=flags.run_id,
        max_restarts=flags.max_restarts,
        attempt=attempt,
    )
    if args.node_rank is not None or args.master_addr:  # this machine's node only
        return dataclasses.replace(
            request,
            where=Where.BY_HAND,
            run_dir=run_dir.absolute(),
            node_rank=args.node_rank,
            master_addr=args.master_addr,
            master_port=args.master_port,
            join_timeout=flags.join_timeout or args.join_timeout,
            host=socket.gethostname(),
        )
    names = ("localhost", "127.0.0.1", socket.gethostname())
    asked = endpoint_port(flags, "127.0.0.1", names, args.master_port)
    port = require_free_port(asked) if asked else free_port()
    return dataclasses.replace(request, master_port=port)


def _run_record(plan: LaunchPlan, argv: list[str]) -> dict[str, object]:
    remote = any(node.remote for node in plan.nodes)
    return {
        "command": argv,
        "backend": "ssh" if remote else "local",
        "script": plan.script,
        "script_args": list(plan.script_args),
        "entry": plan.entry.value,
        "topology": {
            "nnodes": plan.nnodes,
            "nproc_per_node": plan.nproc_per_node,
            "world_size": plan.world_size,
            "master_addr": plan.master_addr,
            "master_port": plan.master_port,
        },
        "hosts": [n.host for n in plan.nodes] if remote else [socket.gethostname()] * plan.nnodes,
        "versions": run_slurm.versions(),
        "cwd": os.getcwd(),
        "status": "running",
        "start_time": rundir.now_iso(),
    }


def main(args: argparse.Namespace) -> int:
    flags = read_flags(args)
    os.environ.update(profile_env(args))  # every rank inherits it, locally and through srun
    over_ssh = run_ssh.wanted(args)
    if run_in_step.wanted(args, os.environ):  # `srun noderun run`: one node of the step's job
        return run_in_step.main(args, flags, os.environ)
    if not over_ssh and run_slurm.inside_allocation(os.environ):  # sbatch or salloc: srun
        return run_slurm.main(args, flags=flags)
    plan = _plan(args, flags)
    args.run_dir = plan.run_dir  # a restart continues in the same run directory
    if args.dry_run:
        print(plan)
        return 0
    record = _run_record(plan, sys.argv)
    previous = rundir.reuse_or_refuse(plan.run_dir)
    if previous is not None:
        record = rundir.next_attempt(previous, record)
        attempt = len(previous.get("attempts") or []) + 2
        print(
            f"noderun: continuing the {previous.get('status')} run in {plan.run_dir} "
            f"(attempt {attempt}); the script resumes if it is given --resume auto",
            flush=True,
        )
    run_json = plan.run_dir / rundir.RUN_JSON
    rundir.take_lock(plan.run_dir)
    try:
        return _supervise(args, flags, plan, record, run_json)
    finally:
        rundir.release_lock(plan.run_dir)
        if over_ssh:
            ssh.close_connections([node.host for node in plan.nodes], args.ssh_config)


def _plan(args: argparse.Namespace, flags: TorchrunFlags, attempt: int = 0) -> LaunchPlan:
    """Simulated nodes here, or one node per host over SSH: the request, materialized."""
    if run_ssh.wanted(args):
        return run_ssh.build_plan(args, flags, attempt)
    return run_request(args, flags, attempt).launch_plan()


def _supervise(
    args: argparse.Namespace,
    flags: TorchrunFlags,
    plan: LaunchPlan,
    record: dict[str, object],
    run_json: Path,
) -> int:
    """Run the gang; after a failure, start it again whole, up to --max-restarts times."""
    attempt, previous = 0, None
    since = timeline.process_start()
    while True:
        timeline.stamp(plan.run_dir, "launcher_started", "launcher", at=since)
        rundir.write_json_atomic(run_json, record)
        print(
            f"noderun: {plan.nnodes} node(s) x {plan.nproc_per_node} = {plan.world_size} ranks, "
            f"master {plan.master_addr}:{plan.master_port}, run dir {plan.run_dir}",
            flush=True,
        )
        result = LocalSupervisor(plan, stall=stall_policy(args), show=flags.shown).run()
        timeline.stamp(plan.run_dir, "teardown_done", "launcher")
        if copied := ssh.copy_back(plan, getattr(args, "ssh_config", None)):  # SSH hosts only
            record["remote_files"] = copied
        outcome = result.outcome(plan.run_dir)
        _record_outcome(record, result, outcome)
        record["timeline"] = timeline.gather(plan.run_dir, since)
        refusal = restart_refusal(outcome, previous, attempt, flags.max_restarts)
        if refusal is not None:
            if flags.max_restarts and outcome.status != "completed":
                record["restart"] = f"not restarted: {refusal}"
            rundir.write_json_atomic(run_json, record)
            report_profile(plan.run_dir, args)
            _report(plan, result, outcome)
            return group_watch.report(plan.run_dir, plan.world_size, plan.nnodes, outcome.exit_code)
        attempt, previous = attempt + 1, outcome
        announce_restart(record, outcome, attempt, flags.max_restarts)
        plan = _plan(args, flags, attempt)
        since = time.time()
        fresh = _run_record(plan, sys.argv)
        fresh["restart_count"] = attempt
        record = rundir.next_attempt(record, fresh)


def _record_outcome(record: dict[str, object], result: RunResult, outcome: Outcome) -> None:
    record.update(outcome.record(rundir.now_iso()))
    record["node_exit_codes"] = {str(k): v for k, v in result.node_exit_codes.items()}
    if result.failure and not result.stalled:  # where and why, as the local backend knows it
        record["failure"].update(  # type: ignore[attr-defined]
            node_rank=result.failure.node_rank,
            local_rank=result.failure.local_rank,
            reason=result.failure.reason(),
        )


def _report(plan: LaunchPlan, result: RunResult, outcome: Outcome) -> None:
    failure = result.failure
    if outcome.status == "failed" and failure is not None and failure.rank is None:
        assert outcome.log is not None
        for line in tail(outcome.log, 15):  # an agent failed: its own words
            print(f"  {line}", file=sys.stderr)
    done = outcome.status == "completed"
    print(outcome.final_line(plan.run_dir), file=sys.stdout if done else sys.stderr, flush=True)
