"""``noderun ls [DIR]``: the runs under runs/ (or DIR), one line each, newest first."""

from __future__ import annotations

import argparse
from pathlib import Path

from noderun.cli_output import print_json, print_table
from noderun.errors import UsageError
from noderun.verbs.options import OptionTable, positional, switch, value

OPTIONS = OptionTable(
    "ls",
    (
        positional("dir", nargs="?", metavar="DIR", help="folder of run directories [--root]"),
        value(
            "--root",
            type=Path,
            default=Path("runs"),
            help="where runs are when DIR is not given (NODERUN_ROOT, or root = in [ls] of "
            "noderun.toml)",
        ),
        switch("--json", help='print the runs as JSON (a list under "runs")'),
    ),
    help="list runs: status, shape, start, duration, last metrics, job id",
    description="List the run directories under DIR (default runs/, or --root), newest "
    "first: name, backend, nodes x processes, status (running, completed, failed, "
    "preempted, cancelled, stalled, launcher died, pending), start (UTC), duration, the "
    "last row of metrics.csv and the SLURM job id. SLURM is asked only about jobs that may "
    "still run.",
)


def main(args: argparse.Namespace) -> int:
    from noderun import run_view
    from noderun.verbs.run_facts import observe, runs_under

    root = Path(args.dir) if args.dir else Path(args.root)
    if not root.is_dir() and not args.dir and root == Path("runs"):
        print(f"no runs under {root}/ (none was started from this folder); pass DIR")
        return 0
    if not root.is_dir():
        raise UsageError(
            f"{root} is not a folder", "pass the folder that holds the run directories (DIR)"
        )
    lines = run_view.newest_first(observe(path).line() for path in runs_under(root))
    if args.json:
        print_json({"root": str(root), "runs": [line.to_json() for line in lines]})
        return 0
    if not lines:
        print(f"no runs under {root}")
        return 0
    print_table(f"runs under {root}", run_view.LS_COLUMNS, [line.row() for line in lines])
    return 0
