"""``noderun scale SCRIPT [ARGS…]``: a sweep over nodes x processes (the runner of ``noderun
sweep``, one point at a time), each point a real, verified run directory; scaling.csv,
scaling.png and scaling.md in the sweep directory."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from noderun.errors import UsageError
from noderun.sweep.runner import PointJob, judge, metric_rows, run_jobs
from noderun.verbs.options import (
    SCRIPT_ARGUMENTS,
    OptionTable,
    existing_script,
    positive_int,
    switch,
    value,
)

OPTIONS = OptionTable(
    "scale",
    (
        value("--nodes", "--nnodes", type=lambda t: int_list(t, "--nodes"), default=(1, 2),
              metavar="N,N…", help="node counts to sweep; --nnodes is the same option"),
        value("--nproc-per-node", type=lambda t: int_list(t, "--nproc-per-node"), default=(1,),
              metavar="P,P…", help="processes per node to sweep"),
        value("--scaling", choices=("strong", "weak"), default="strong",
              help="strong: fixed global work; weak: fixed work per rank (the script reads "
              "NODERUN_SCALING and NODERUN_SCALE_FACTOR)"),
        value("--out", type=Path, help="sweep directory (default runs/scale-<script>-…)"),
        switch("--submit", help="run every point as a SLURM job (noderun submit --wait)"),
        value("--time", help="with --submit: each job's time limit (sbatch --time)"),
        value("--partition", help="with --submit: the partition"),
        value("--point-timeout", type=positive_int, default=1800, metavar="SECONDS",
              help="give up on a point after this long"),
        switch("--json", help="print one JSON object at the end on stdout (schema, sweep "
               "directory, one row per point); the progress and the table go to stderr"),
        *SCRIPT_ARGUMENTS,
    ),
help="sweep nodes x processes: speedup, efficiency, where the time goes",
 description="Run SCRIPT once per point of --nodes x --nproc-per-node (locally, or "
        "with --submit on SLURM), verify each run, and write scaling.csv, scaling.png and "
        "scaling.md. A failing point is reported with its explain finding and the sweep goes "
        "on. The script is told the scaling mode by NODERUN_SCALING=strong|weak and, for weak "
        "scaling, how much more work to do by NODERUN_SCALE_FACTOR (ranks / ranks of the "
        "smallest point).",
)  # fmt: skip


def int_list(text: str, flag: str) -> tuple[int, ...]:
    """'1,2,4' -> (1, 2, 4), every value >= 1, or a one-line reason."""
    try:
        values = tuple(positive_int(part.strip()) for part in text.split(",") if part.strip())
    except argparse.ArgumentTypeError as err:
        raise argparse.ArgumentTypeError(f"{flag} {text!r}: {err}") from None
    if not values:
        raise argparse.ArgumentTypeError(f"{flag} needs at least one value, e.g. 1,2,4")
    return values


def main(args: argparse.Namespace) -> int:
    from noderun.scale.analysis import plan_points, rows_csv, rows_markdown, scaling_rows
    from noderun.scale.plot import plot_scaling

    script = existing_script(args.script).resolve()
    out = args.out or _default_out(script)
    if out.exists() and any(out.iterdir()):
        raise UsageError(f"sweep directory {out} is not empty", "pass a new --out DIR")
    if not args.submit and (args.time or args.partition):
        raise UsageError("--time and --partition only apply to --submit", "add --submit")
    points = plan_points(args.nodes, args.nproc_per_node)
    out.mkdir(parents=True, exist_ok=True)
    base_ranks = points[0].ranks
    jobs = {point.name: _point_job(args, script, out, point, base_ranks) for point in points}
    by_name = {point.name: point for point in points}
    done: dict[str, Any] = {}
    with _Progress(len(points)) as progress:

        def ended(job: PointJob, code: int) -> None:
            done[job.name] = _result(by_name[job.name], job, code)
            progress.done(job.name, done[job.name].ok, done[job.name].finding)

        started = lambda job: progress.start(job.name)  # noqa: E731
        run_jobs(list(jobs.values()), 1, args.point_timeout, started, ended)
    results = [done[point.name] for point in points]
    rows = scaling_rows(results, args.scaling)
    (out / "scaling.csv").write_text(rows_csv(rows))
    (out / "scaling.md").write_text(rows_markdown(rows, args.scaling, os.cpu_count()))
    title = f"{script.name}: {args.scaling} scaling on {os.cpu_count()} cores"
    plotted = plot_scaling(rows, out / "scaling.png", title)
    print((out / "scaling.md").read_text(), end="")
    written = "scaling.csv, scaling.md" + (", scaling.png" if plotted else "")
    if not plotted:
        written += " (no plot: pip install matplotlib, or no point succeeded)"
    print(f"noderun: sweep of {len(points)} point(s) in {out}: {written}")
    args.json_result = {  # printed by --json
        "verb": "scale",
        "out": str(out.resolve()),
        "scaling": args.scaling,
        "files": ["scaling.csv", "scaling.md", *(["scaling.png"] if plotted else [])],
        "points": [_row_dict(row) for row in rows],
    }
    failed = [r.point.name for r in results if not r.ok]
    if failed:
        print(f"noderun: {len(failed)} point(s) failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


def _row_dict(row: Any) -> dict[str, Any]:
    """A scaling row for --json: the point's shape, then the row's measurements."""
    fields = {k: v for k, v in dataclasses.asdict(row).items() if k != "point"}
    point = row.point
    return {"name": point.name, "nodes": point.nodes, "nproc_per_node": point.nproc_per_node,
            "ranks": point.ranks, **fields}  # fmt: skip


def _default_out(script: Path) -> Path:
    from noderun.rundir import new_run_dir

    return new_run_dir(f"scale-{script.stem}.py")


def _point_job(
    args: argparse.Namespace, script: Path, out: Path, point: Any, base_ranks: int
) -> PointJob:
    """The point as a sweep point: ``noderun run`` (or ``submit --wait``) of its shape."""
    run_dir = out / point.name
    factor = point.ranks / base_ranks
    env = {
        **os.environ,
        "NODERUN_SCALING": args.scaling,
        "NODERUN_SCALE_FACTOR": str(int(factor)) if factor.is_integer() else f"{factor:.4f}",
    }
    size = [f"--nproc-per-node={point.nproc_per_node}", f"--run-dir={run_dir}"]
    if args.submit:
        cmd = ["submit", "--wait", f"--nodes={point.nodes}", *size]
        cmd += [f"--time={args.time}"] if args.time else []
        cmd += [f"--partition={args.partition}"] if args.partition else []
    else:
        cmd = ["run", f"--nnodes={point.nodes}", *size]
    argv = (sys.executable, "-m", "noderun", *cmd, str(script), *args.script_args)
    return PointJob(point.name, argv, run_dir, out / f"{point.name}.log", env)


def _result(point: Any, job: PointJob, code: int) -> Any:
    from noderun.scale.analysis import PointResult

    verdict = judge(job.run_dir, job.log, code)
    return PointResult(
        point=point,
        ok=verdict.healthy,
        run_dir=str(job.run_dir),
        wall_sec=verdict.wall_sec,
        metrics=tuple(metric_rows(job.run_dir)),
        finding=verdict.finding,
    )


class _Progress:
    """A rich progress bar on a terminal, one plain line per point otherwise."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.bar: Any = None
        self.task: Any = None
        self.log: Callable[[str], None] = lambda text: print(text, flush=True)

    def __enter__(self) -> _Progress:
        if sys.stdout.isatty():
            from rich.progress import Progress

            self.bar = Progress(transient=True)
            self.bar.__enter__()
            self.task = self.bar.add_task("sweep", total=self.total)
            self.log = self.bar.console.print
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.__exit__(None, None, None)

    def start(self, name: str) -> None:
        if self.bar is not None:
            self.bar.update(self.task, description=f"point {name}")
        else:
            self.log(f"noderun: scale point {name} …")

    def done(self, name: str, ok: bool, finding: str) -> None:
        self.log(f"noderun: point {name} " + ("ok" if ok else f"FAILED: {finding}"))
        if self.bar is not None:
            self.bar.advance(self.task)
