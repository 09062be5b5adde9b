"""``noderun doctor``: preflight checks on every node at once, one aggregated report."""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

from noderun import atomic
from noderun.verbs.options import OptionTable, add_verb, positive_int, switch, value

if TYPE_CHECKING:
    from noderun.doctor.runner import DoctorResult


OPTIONS = OptionTable(
    "doctor",
    (
        switch("--json", help="print the report as JSON"),
        switch("--submit", help="submit itself with sbatch"),
        value("--nodes", type=positive_int, default=2, help="nodes for --submit"),
        value("--nproc-per-node", type=positive_int, help="ranks per node (2 here, 1 in SLURM)"),
        value("--partition", help="partition for --submit"),
        value("--hosts", metavar="HOST,HOST…", help="probe these hosts over ssh (no SLURM)"),
        value("--ssh-config", help="ssh client configuration file for --hosts (ssh -F)"),
        value("--run-dir", type=Path, help="where logs go (default runs/doctor-…)"),
        value("--result-file", type=Path, env=False, help=argparse.SUPPRESS),
    ),
)


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    add_verb(
        sub,
        OPTIONS,
        main,
        help="preflight checks on every node: versions, network, port, filesystem, collective",
        description="Probe this machine, or every node of the SLURM allocation it runs in (one "
        "probe per node through srun), then run a real all_reduce test; print a node x check "
        "table with a fix for each failure. Exit 1 if any check fails.",
    )


def main(args: argparse.Namespace) -> int:
    from noderun.doctor import runner
    from noderun.topology import in_slurm_allocation

    run_dir = (args.run_dir or Path("runs") / f"doctor-{time.strftime('%Y%m%d-%H%M%S')}").resolve()
    inside = in_slurm_allocation(os.environ)
    nproc = args.nproc_per_node or (1 if inside or args.submit else 2)
    started = time.monotonic()
    hosts = [h.strip() for h in (args.hosts or "").split(",") if h.strip()]
    if hosts:
        result = runner.run_over_ssh(hosts, run_dir, args.nproc_per_node or 1, args.ssh_config)
    elif args.submit:
        result = runner.submit(args.nodes, nproc, run_dir, args.partition)
    elif inside:
        result = runner.run_in_allocation(run_dir, nproc, os.environ)
    else:
        result = runner.run_local(run_dir, nproc)
    if not args.submit:
        result.duration_sec = round(time.monotonic() - started, 2)
    if args.result_file:
        atomic.write_text(args.result_file, json.dumps(result.to_dict(), indent=2), durable=False)
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
    else:
        print_report(result)
    return 0 if result.healthy else 1


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
