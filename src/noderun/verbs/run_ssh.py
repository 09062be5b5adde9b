"""``noderun run --hosts a,b`` / ``--hostfile F``: one node per host over SSH.

The options, and the plan after every host was checked (``backends/ssh.py``); ``run.py``
supervises it like simulated nodes.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from noderun import rundir
from noderun.backends import ssh
from noderun.errors import UsageError
from noderun.plan import LaunchPlan
from noderun.plan.ssh import SSH_GUARD, forwarded_env, hosts_and_slots, parse_hostfile, plan_ssh
from noderun.verbs.options import env_pair, repeated, value
from noderun.verbs.torchrun_flags import TorchrunFlags, check_program, restart_env, run_dir_for

OPTIONS = (
    value("--hosts", metavar="HOST,HOST…", help="run one node per host over ssh (node 0 first)"),
    value("--hostfile", type=Path, help="hosts as `HOST slots=N` lines (Open MPI, DeepSpeed)"),
    value("--ssh-config", help="ssh client configuration file (ssh -F), e.g. keys and users"),
    repeated("--env", type=env_pair, metavar="K=V", help="set K=V for every rank (repeatable)"),
)


DRY_RUN_PORT = 29500  # shown by --dry-run without --master-port: the real one is asked of node 0


def wanted(args: argparse.Namespace) -> bool:
    return bool(getattr(args, "hosts", None) or getattr(args, "hostfile", None))


def hosts_of(args: argparse.Namespace) -> tuple[list[str], int]:
    """Host names and processes per host from --hosts or --hostfile (+ --nproc-per-node)."""
    if args.hosts and args.hostfile:
        raise UsageError("--hosts and --hostfile both given", "give one of them")
    if args.hostfile:
        try:
            text = Path(args.hostfile).read_text()
        except OSError as err:
            raise UsageError(
                f"cannot read --hostfile {args.hostfile}: {err.strerror}", "check the path"
            ) from None
        entries = parse_hostfile(text, str(args.hostfile))
    else:
        entries = [(h.strip(), None) for h in args.hosts.split(",") if h.strip()]
        if not entries:
            raise UsageError("--hosts names no host", "give --hosts HOST,HOST")
    spec = args.nproc_per_node
    if isinstance(spec, str):
        raise UsageError(
            f"--nproc-per-node {spec} is not known before the hosts are asked",
            "give a number, or slots=N in the --hostfile",
        )
    explicit = spec if spec != 1 or not any(s for _, s in entries) else None
    return hosts_and_slots(entries, explicit)


def build_plan(args: argparse.Namespace, flags: TorchrunFlags, attempt: int = 0) -> LaunchPlan:
    hosts, nproc = hosts_of(args)
    if args.nnodes not in (None, len(hosts)):
        raise UsageError(
            f"--nnodes {args.nnodes} but {len(hosts)} host(s) given",
            "leave --nnodes out: one node per host",
        )
    program = check_program(args.script, flags.entry)
    run_dir = run_dir_for(args, flags).absolute()
    if attempt == 0:
        rundir.reuse_or_refuse(run_dir)
    cwd, python = os.getcwd(), sys.executable
    if args.dry_run:  # print the commands, ask no host
        port = args.master_port or DRY_RUN_PORT
    else:
        try:
            port = ssh.preflight(hosts, cwd, python, SSH_GUARD, args.master_port, args.ssh_config)
        except BaseException:
            ssh.close_connections(hosts, args.ssh_config)  # nothing stays open after a refusal
            raise
    env = {**forwarded_env(os.environ), **dict(args.env)}
    if flags.max_restarts:
        env.update(restart_env(attempt, flags.max_restarts))
    return plan_ssh(
        hosts=hosts,
        nproc_per_node=nproc,
        master_port=port,
        run_dir=run_dir,
        script=os.path.abspath(program) if flags.entry.value == "script" else program,
        script_args=args.script_args,
        run_id=flags.run_id or run_dir.name,
        cwd=cwd,
        python=python,
        guard=SSH_GUARD,
        env=env,
        entry=flags.entry,
        ssh_config=args.ssh_config,
    )
