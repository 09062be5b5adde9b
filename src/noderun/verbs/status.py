"""``noderun status RUN|JOB``: the run (its SLURM job) and every rank; ``--watch`` keeps it live."""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING, Any

from noderun.cli_output import print_json, print_table
from noderun.verbs.options import (
    OptionTable,
    positional,
    refuse_unless_applies,
    switch,
)

if TYPE_CHECKING:
    from rich.console import RenderableType

    from noderun.verbs.run_facts import Observed

REFRESH_SEC = 1.0

OPTIONS = OptionTable(
    "status",
    (
        positional("target", metavar="RUN|JOB", help="run directory, or a SLURM job id"),
        switch("--json", help="print the status as one JSON object"),
        switch("--watch", help="a live view, refreshed every second, until the run ends"),
    ),
    help="show a run's status and each rank's step, rate and last line",
    description="Show a run (or the run of a SLURM job id): its status, backend, shape, "
    "SLURM state, elapsed time and nodes, the last row of metrics.csv (its last step or "
    "epoch), and for each rank its host, the step (and epoch) its TrainingLoop finished "
    "last and its steps per second, the progress noderun's runtime counted (steps, "
    "collectives: what the stall watch reads) and its rate, the age of its last log line "
    "and whether it stalled. --watch redraws it every second until the run "
    "ends (Ctrl-C leaves; the run goes on).",
)


def main(args: argparse.Namespace) -> int:
    from noderun.verbs.run_facts import observe, resolve

    if args.json:
        refuse_unless_applies(args, ("watch",), "is a live view, not JSON", "drop one of them")
    run_dir = resolve(args.target)
    if args.watch:
        return watch(run_dir)
    seen = observe(run_dir)
    if args.json:
        print_json(to_json(seen))
        return 0
    print(*header(seen), sep="\n")
    print_table("ranks", _columns(), [line.row() for line in seen.ranks()])
    return 0


def to_json(seen: Observed) -> dict[str, Any]:
    line = seen.line()
    return {
        **line.to_json(),
        "job": seen.job_json(),
        "hosts": seen.record.hosts,
        "ranks": [rank.to_json() for rank in seen.ranks()],
    }


def header(seen: Observed) -> list[str]:
    from noderun import run_view

    line = seen.line()
    lines = [
        f"run      {seen.run_dir}",
        f"status   {line.status}  ({line.backend or '-'}, {line.shape} nodes x processes, "
        f"{run_view.duration_text(line.duration)} since {run_view.started_text(line.started)} "
        "UTC)",
        f"metrics  {run_view.metric_text(line.last_metrics, limit=6)}",
    ]
    job = seen.job_json()
    if job:
        lines.append(
            f"job      {job['id']}  {job['state'] or 'unknown to SLURM'}"
            + (f", elapsed {job['elapsed']}" if job["elapsed"] else "")
            + (f", nodes {job['nodes']}" if job["nodes"] else "")
        )
    return lines


def _columns() -> tuple[str, ...]:
    from noderun import run_view

    return run_view.RANK_COLUMNS


def watch(run_dir: Any) -> int:
    """Redraw every second until the run is no longer live; Ctrl-C leaves it running."""
    from rich.console import Console
    from rich.live import Live

    from noderun import run_view
    from noderun.verbs.run_facts import observe

    console = Console()
    samples: dict[int, tuple[float, int | None]] | None = None
    seen = observe(run_dir)
    try:
        with Live(
            _view(seen, seen.ranks()), console=console, refresh_per_second=4, transient=False
        ) as live:
            while seen.status in run_view.LIVE:
                time.sleep(REFRESH_SEC)
                seen = observe(run_dir)
                ranks = seen.ranks(samples)
                samples = {r.rank: (seen.at, r.progress) for r in ranks}
                live.update(_view(seen, ranks))
    except KeyboardInterrupt:
        print(f"noderun: stopped watching; the run goes on ({run_dir})", file=sys.stderr)
        return 0
    return 0


def _view(seen: Observed, ranks: list[Any]) -> RenderableType:
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    table = Table(*_columns(), title=None, box=None, pad_edge=False)
    for rank in ranks:
        table.add_row(*rank.row())
    said = Text("\n".join(header(seen)))
    stamp = Text(time.strftime("updated %H:%M:%S (every second; Ctrl-C leaves)"), style="dim")
    return Group(said, table, stamp)
