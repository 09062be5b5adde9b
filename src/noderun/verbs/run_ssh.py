"""``noderun run --hosts a,b`` / ``--hostfile F``: one node per host over SSH.

The options, and the plan after every host was checked (``backends/ssh.py``); ``run.py``
supervises it like simulated nodes.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path

from noderun import rundir
from noderun.backends import ssh
from noderun.errors import UsageError
from noderun.plan import LaunchPlan
from noderun.plan.launch import Entry
from noderun.plan.run import RunRequest, Where
from noderun.plan.ssh import SSH_GUARD, forwarded_env, hosts_and_slots, parse_hostfile
from noderun.verbs.options import env_pair, repeated, value
from noderun.verbs.torchrun_flags import TorchrunFlags, check_program, run_dir_for

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
    """Check every host (``backends/ssh.py``), then materialize the request; nothing started."""
    hosts, nproc = hosts_of(args)
    request = RunRequest(
        where=Where.SSH,
        program=args.script,
        run_dir=run_dir_for(args, flags).absolute(),
        nproc_per_node=nproc,
        script_args=tuple(args.script_args),
        entry=flags.entry,
        nnodes=args.nnodes,
        hosts=tuple(hosts),
        run_id=flags.run_id,
        max_restarts=flags.max_restarts,
        attempt=attempt,
        cwd=os.getcwd(),
        python=sys.executable,
        env=tuple({**forwarded_env(os.environ), **dict(args.env)}.items()),
        hidden_env=tuple(key for key, _ in args.env),
        ssh_config=args.ssh_config,
        agent_flags=flags.agent_flags,
    )
    request.check()  # before any host is asked
    program = check_program(args.script, flags.entry)
    if attempt == 0:
        rundir.reuse_or_refuse(request.run_dir)
    if args.dry_run:  # print the commands, ask no host
        port = args.master_port or DRY_RUN_PORT
    else:
        try:
            port = ssh.preflight(
                hosts, request.cwd, request.python, SSH_GUARD, args.master_port, args.ssh_config
            )
        except BaseException:
            ssh.close_connections(hosts, args.ssh_config)  # nothing stays open after a refusal
            raise
    script = os.path.abspath(program) if flags.entry is Entry.SCRIPT else program
    return dataclasses.replace(request, program=script, master_port=port).launch_plan()
