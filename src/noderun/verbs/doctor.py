"""``noderun doctor``: preflight checks on every node at once, one aggregated report."""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

from noderun import atomic
from noderun.cli_output import print_json
from noderun.errors import UsageError
from noderun.plan.launch import TORCHRUN_DEFAULT_PORT
from noderun.verbs.options import (
    OptionTable,
    port_number,
    positive_int,
    repeated,
    switch,
    value,
)

if TYPE_CHECKING:
    from noderun.doctor.runner import DoctorResult


OPTIONS = OptionTable(
    "doctor",
    (
        switch("--json", help="print the report as JSON"),
        switch("--submit", help="submit itself with sbatch"),
        value(
            "--nnodes",
            "--nodes",
            type=positive_int,
            help="how many nodes: with --submit, the job's (default 2); with --node-rank "
            "(nodes started by hand), how many were started; --nodes is the same option",
        ),
        value("--nproc-per-node", type=positive_int, help="ranks per node (2 here, 1 in SLURM)"),
        value("--partition", help="partition for --submit"),
        value("--hosts", metavar="HOST,HOST…", help="probe these hosts over ssh (no SLURM)"),
        value("--ssh-config", help="ssh client configuration file for --hosts (ssh -F)"),
        # flags only: a stray NODERUN_NODE_RANK (old launcher) must not make a doctor hand-started
        value("--node-rank", type=int, env=False, help="nodes started by hand: this node, 0..N-1"),
        value("--master-addr", env=False, help="nodes started by hand: node 0's address"),
        value(
            "--master-port",
            type=port_number,
            env=False,
            help="nodes started by hand: node 0's port (default 29500; the next one is used too); "
            "elsewhere the port is the one `noderun run` would pick",
        ),
        value("--script", help="training script: its hash must match on every node"),
        repeated(
            "--check-path",
            metavar="PATH",
            help="a path (data, model) every node must see (repeatable)",
        ),
        value("--run-dir", type=Path, help="where logs go (default runs/doctor-…)"),
        value("--result-file", type=Path, env=False, help=argparse.SUPPRESS),
    ),
    help="preflight checks on every node: versions, network, port, filesystem, collective",
    description="Probe this machine, every node of the SLURM allocation it runs in (one "
    "probe per node through srun), or every --hosts host over ssh, then run a real "
    "all_reduce test; print a node x check table with a fix for each failure: versions, "
    "the same code (hashes of --script, noderun and torch), --check-path paths, network, "
    "port, filesystem. Exit 1 if any check fails.",
)


def main(args: argparse.Namespace) -> int:
    from noderun.doctor import runner
    from noderun.topology import in_slurm_allocation

    run_dir = (args.run_dir or Path("runs") / f"doctor-{time.strftime('%Y%m%d-%H%M%S')}").resolve()
    inside = in_slurm_allocation(os.environ)
    nproc = args.nproc_per_node or (1 if inside or args.submit else 2)
    started = time.monotonic()
    hosts = [h.strip() for h in (args.hosts or "").split(",") if h.strip()]
    checklist = runner.Checklist(
        os.path.abspath(args.script) if args.script else None,
        tuple(os.path.abspath(p) for p in args.check_path),
    )
    _refuse_other_modes(args, bool(hosts), inside)
    if args.node_rank is not None or args.master_addr:
        nnodes = _hand_started(args)
        port = args.master_port or TORCHRUN_DEFAULT_PORT
        result = runner.run_hand_started(
            nnodes, args.node_rank, args.master_addr, port, run_dir, checklist
        )
    elif hosts:
        result = runner.run_over_ssh(
            hosts, run_dir, args.nproc_per_node or 1, args.ssh_config, checklist
        )
    elif args.submit:
        result = runner.submit(args.nnodes or 2, nproc, run_dir, args.partition, checklist)
    elif inside:
        result = runner.run_in_allocation(run_dir, nproc, os.environ, checklist)
    else:
        result = runner.run_local(run_dir, nproc, checklist)
    if not args.submit:
        result.duration_sec = round(time.monotonic() - started, 2)
    if args.result_file:
        atomic.write_text(args.result_file, json.dumps(result.to_dict(), indent=2), durable=False)
    if args.json:
        print_json(result.to_dict())
    else:
        print_report(result)
    return 0 if result.healthy else 1


# the options each way of running doctor reads; any other given as a flag is refused
_MODE_OPTIONS = {
    "by hand": ("nnodes", "node_rank", "master_addr", "master_port"),
    "--hosts": ("hosts", "ssh_config", "nproc_per_node"),
    "--submit": ("submit", "nnodes", "nproc_per_node", "partition"),
    "SLURM allocation": ("nproc_per_node",),
    "local": ("nproc_per_node",),
}
_HINTS = {
    "nnodes": "use --submit --nnodes N, or --nnodes N --node-rank R --master-addr NODE0 on "
    "every machine started by hand",
    "node_rank": "drop it, or run doctor by hand on every machine without --submit/--hosts",
    "master_addr": "drop it, or run doctor by hand on every machine without --submit/--hosts",
    "master_port": "drop it: the port is the one `noderun run` would pick (from the job id in "
    "SLURM, a free one here); it is only chosen for nodes started by hand",
    "hosts": "give --hosts alone, or drop it",
    "ssh_config": "add --hosts HOST,HOST, or drop it",
    "partition": "add --submit, or drop it",
    "submit": "drop --submit inside an allocation, or --hosts / --node-rank",
}
_SHARED = ("json", "script", "check_path", "run_dir", "result_file")


def _refuse_other_modes(args: argparse.Namespace, hosts: bool, inside: bool) -> None:
    """How this doctor runs; an option given for another way is refused in one line."""
    by_hand = args.node_rank is not None or bool(args.master_addr)
    mode = (
        "by hand" if by_hand
        else "--hosts" if hosts
        else "--submit" if args.submit
        else "SLURM allocation" if inside
        else "local"
    )  # fmt: skip
    reads = (*_MODE_OPTIONS[mode], *_SHARED)
    for option in OPTIONS.options:
        name = option.name
        if name in args.given_options and name not in reads:
            raise UsageError(
                f"{option.flags[0]} does not apply to doctor {_describe(mode)}",
                _HINTS.get(name, "drop it"),
            )


def _describe(mode: str) -> str:
    return {
        "by hand": "on nodes started by hand (--node-rank)",
        "--hosts": "over ssh (--hosts)",
        "--submit": "as a submitted job (--submit)",
        "SLURM allocation": "inside a SLURM allocation",
        "local": "on this machine",
    }[mode]


def _hand_started(args: argparse.Namespace) -> int:
    """--nnodes of a node started by hand, once --node-rank and --master-addr make sense."""
    nnodes = args.nnodes or 0
    if args.node_rank is None or not args.master_addr or nnodes < 2:
        raise UsageError(
            "a node started by hand needs --node-rank, --nnodes (2 or more) and --master-addr",
            "run `noderun doctor --nnodes N --node-rank R --master-addr NODE0` on every "
            "machine, R = 0..N-1",
        )
    if not 0 <= args.node_rank < nnodes:
        raise UsageError(
            f"--node-rank {args.node_rank} is not in 0..{nnodes - 1}", "give 0..N-1 for --nnodes N"
        )
    return int(nnodes)


def print_report(result: DoctorResult) -> None:
    from noderun.cli_output import print_table

    nodes = [*result.nodes, *(["all"] if any(c.node == "all" for c in result.checks) else [])]
    names = list(dict.fromkeys(c.check.name for c in result.checks))
    cell = {(c.node, c.check.name): c.check.status.value for c in result.checks}
    rows = [(name, *(cell.get((n, name), "-") for n in nodes)) for name in names]
    print_table(f"noderun doctor ({result.mode})", ("check", *nodes), rows)
    for item in result.checks:
        status = item.check.status.value
        if status in ("FAIL", "WARN") or item.check.name == "collective":
            fix = f"\n    fix: {item.check.fix}" if item.check.fix and status != "PASS" else ""
            print(f"  {status} {item.node} {item.check.name}: {item.check.detail}{fix}")
    if result.collective:
        print("  all_reduce (nccl-tests conventions):  size  time  algbw  busbw")
        for size in result.collective["all_reduce"]:
            print(
                f"    {size['size_bytes']:>10} B  {size['time_us']:>10.1f} us  "
                f"{size['algbw_gbps']:.3f} GB/s  {size['busbw_gbps']:.3f} GB/s"
            )
    print("verdict: READY" if result.healthy else "verdict: NOT READY (see the fixes above)")
