"""``noderun run``: launch a script on N simulated nodes of this machine."""

from __future__ import annotations

import argparse
import os
import platform
import socket
import sys
from importlib import metadata
from pathlib import Path

from noderun import rundir
from noderun.backends.local import LocalSupervisor, RunResult, tail
from noderun.backends.ports import free_port, require_free_port
from noderun.outcome import Outcome
from noderun.plan import LaunchPlan, plan_local
from noderun.verbs import run_slurm
from noderun.verbs.options import (
    SCRIPT_ARGUMENTS,
    STALL_OPTIONS,
    OptionTable,
    add_verb,
    existing_script,
    port_number,
    positive_int,
    stall_policy,
    switch,
    value,
)
from noderun.verbs.profiling import PROFILE_OPTION, profile_env, report_profile

OPTIONS = OptionTable(
    "run",
    (
        value("--nnodes", type=positive_int, help="nodes (default 1; inside SLURM: all allocated)"),
        value("--nproc-per-node", type=positive_int, default=1, help="processes per node"),
        value("--run-dir", type=Path, help="run directory (default runs/<name>-…)"),
        value("--master-port", type=port_number, help="rendezvous port (default: free)"),
        *STALL_OPTIONS,
        PROFILE_OPTION,
        *run_slurm.ALLOCATION_OPTIONS,
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


def build_plan(args: argparse.Namespace) -> LaunchPlan:
    """Check every input before anything starts; raise UsageError with the fix."""
    script = existing_script(args.script)
    run_dir = (args.run_dir or rundir.new_run_dir(args.script)).resolve()
    rundir.reuse_or_refuse(run_dir)  # a stopped run continues in place; others are refused
    port = require_free_port(args.master_port) if args.master_port else free_port()
    return plan_local(
        nnodes=args.nnodes or 1,
        nproc_per_node=args.nproc_per_node,
        master_port=port,
        run_dir=run_dir,
        script=str(script.resolve()),
        script_args=args.script_args,
        run_id=run_dir.name,
    )


def _run_record(plan: LaunchPlan, argv: list[str]) -> dict[str, object]:
    return {
        "command": argv,
        "backend": "local",
        "script": plan.script,
        "script_args": list(plan.script_args),
        "topology": {
            "nnodes": plan.nnodes,
            "nproc_per_node": plan.nproc_per_node,
            "world_size": plan.world_size,
            "master_addr": plan.master_addr,
            "master_port": plan.master_port,
        },
        "hosts": [socket.gethostname()] * plan.nnodes,
        "versions": {
            "python": platform.python_version(),
            "torch": metadata.version("torch"),
            "noderun": metadata.version("noderun"),
        },
        "cwd": os.getcwd(),
        "status": "running",
        "start_time": rundir.now_iso(),
    }


def main(args: argparse.Namespace) -> int:
    os.environ.update(profile_env(args))  # every rank inherits it, locally and through srun
    if run_slurm.inside_allocation(os.environ):  # sbatch script or salloc shell: srun the nodes
        return run_slurm.main(args)
    plan = build_plan(args)
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
        return _supervise(args, plan, record, run_json)
    finally:
        rundir.release_lock(plan.run_dir)


def _supervise(
    args: argparse.Namespace, plan: LaunchPlan, record: dict[str, object], run_json: Path
) -> int:
    rundir.write_json_atomic(run_json, record)
    print(
        f"noderun: {plan.nnodes} node(s) x {plan.nproc_per_node} = {plan.world_size} ranks, "
        f"master 127.0.0.1:{plan.master_port}, run dir {plan.run_dir}",
        flush=True,
    )
    result = LocalSupervisor(plan, stall=stall_policy(args)).run()
    outcome = result.outcome(plan.run_dir)
    record.update(outcome.record(rundir.now_iso()))
    record["node_exit_codes"] = {str(k): v for k, v in result.node_exit_codes.items()}
    if result.failure and not result.stalled:  # where and why, as the local backend knows it
        record["failure"].update(  # type: ignore[attr-defined]
            node_rank=result.failure.node_rank,
            local_rank=result.failure.local_rank,
            reason=result.failure.reason(),
        )
    rundir.write_json_atomic(run_json, record)
    report_profile(plan.run_dir, args)
    _report(plan, result, outcome)
    return outcome.exit_code


def _report(plan: LaunchPlan, result: RunResult, outcome: Outcome) -> None:
    failure = result.failure
    if outcome.status == "failed" and failure is not None and failure.rank is None:
        assert outcome.log is not None
        for line in tail(outcome.log, 15):  # an agent failed: its own words
            print(f"  {line}", file=sys.stderr)
    done = outcome.status == "completed"
    print(outcome.final_line(plan.run_dir), file=sys.stdout if done else sys.stderr, flush=True)
