"""``noderun sweep --param k=v1,v2 … SCRIPT [ARGS…]``: a grid over a script's arguments, every
point a run directory of its own under --out; locally at most --max-parallel at once, or with
--submit one SLURM job array whose tasks each run one point as a multi-node job. A re-run of
the same command skips the points that completed and runs the others (again). At the end: one
table, sweep.csv and sweep.png (--metric against each parameter)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from noderun import notify
from noderun.errors import UsageError
from noderun.sweep.grid import ParamError, Point, expand, parse_param, point_args
from noderun.sweep.runner import (
    PointJob,
    already_done,
    final_metrics,
    judge,
    point_record,
    run_jobs,
)
from noderun.sweep.table import SweepRow, row_json, rows_csv, rows_text
from noderun.verbs.options import (
    NOTIFY_OPTION,
    SCRIPT_ARGUMENTS,
    OptionTable,
    env_pair,
    existing_script,
    positive_int,
    repeated,
    switch,
    value,
)

SUBMIT_ONLY = ("partition", "account", "time", "signal", "setup", "qos")

OPTIONS = OptionTable(
    "sweep",
    (
        repeated("--param", metavar="NAME=V1,V2…", env=True,
                 help="a parameter and its values (repeatable; the grid is their product); each "
                 "point appends --NAME V to ARGS, or replaces {NAME} where ARGS mention it"),
        value("--out", type=Path,
              help="sweep directory, one run directory per point (default runs/sweep-<script>; "
              "the same --out again continues the sweep)"),
        value("--max-parallel", type=positive_int, default=1, metavar="P",
              help="points running at once (locally; with --submit the array's %%P)"),
        value("--metric", metavar="NAME",
              help="metrics.csv column to plot against the parameters (sweep.png) and list first"),
        value("--nnodes", "--nodes", type=positive_int, default=1,
              help="nodes of every point; --nodes is the same option"),
        value("--nproc-per-node", type=positive_int, default=1, help="processes per node"),
        repeated("--env", type=env_pair, metavar="K=V", help="export K=V for every point's ranks"),
        value("--point-timeout", type=positive_int, metavar="SECONDS",
              help="locally: stop a point after this long (default: no limit)"),
        NOTIFY_OPTION,
        switch("--json", help="print one JSON object at the end on stdout (schema, sweep "
               "directory, files, one object per point as in sweep.csv); the progress and "
               "the table go to stderr"),
        switch("--submit", help="one SLURM job array, task i running point i (requeued alone "
               "when preempted); the sweep follows it to the end"),
        value("--partition", help="with --submit: the partition"),
        value("--account", help="with --submit: the account to charge"),
        value("--time", help="with --submit: each point's time limit"),
        value("--signal", help="with --submit: signal before the time limit, e.g. USR1@90"),
        value("--qos", help="with --submit: quality of service"),
        value("--setup", help="with --submit: shell line(s) run before each point"),
        *SCRIPT_ARGUMENTS,
    ),
help="a grid over a script's arguments: one run per point, a table and a plot",
 description="Run SCRIPT once per point of the --param grid, each in its own run "
        "directory under --out (named after the point, e.g. lr=0.001,batch=32), locally or as "
        "one SLURM job array (--submit). Running the same command again skips the points that "
        "completed and runs the failed or unfinished ones again. At the end: a table (status, "
        "final metrics, verify's verdict, explain's cause of each failure), sweep.csv and "
        "sweep.png.",
)  # fmt: skip


def points_of(texts: Sequence[str]) -> list[Point]:
    """The grid, or a one-line UsageError naming the bad --param."""
    try:
        return expand([parse_param(text) for text in texts])
    except ParamError as err:
        raise UsageError(str(err), err.hint) from None


def main(args: argparse.Namespace) -> int:
    points = points_of(args.param)
    script = existing_script(args.script).resolve()
    if not args.submit:
        given = [f"--{n}" for n in SUBMIT_ONLY if getattr(args, n)]
        if given:
            raise UsageError(f"{', '.join(given)} only apply to --submit", "add --submit")
    out = (args.out or Path("runs") / f"sweep-{script.stem}").absolute()
    if args.submit:
        from noderun.verbs import sweep_array

        sweep_array.check_size(len(points))
    todo = [p for p in points if not already_done(out / p.name)]
    if len(todo) < len(points):
        print(f"noderun: continuing the sweep in {out}: {len(points) - len(todo)} of "
              f"{len(points)} point(s) completed before, not run again", flush=True)  # fmt: skip
    codes: dict[str, int | None] = {}  # a task's exit code is in its run.json's status
    tasks: dict[str, str] = {}
    if args.submit:
        tasks = sweep_array.submit(args, script, out, points, todo)
    else:
        out.mkdir(parents=True, exist_ok=True)
        codes.update(_run_here(args, script, out, todo))
    rows = [_row(out, p, codes.get(p.name), tasks.get(p.name)) for p in points]
    return _report(args, script, out, rows)


def _run_here(
    args: argparse.Namespace, script: Path, out: Path, todo: Sequence[Point]
) -> dict[str, int]:
    env = {**os.environ, **dict(args.env)} if args.env else None
    jobs = [
        PointJob(
            name=p.name,
            argv=(sys.executable, "-m", "noderun", *_run_argv(args, out / p.name),
                  str(script), *point_args(args.script_args, p)),
            run_dir=out / p.name,
            log=out / f"{p.name}.log",
            env=env,
        )
        for p in todo
    ]  # fmt: skip

    def started(job: PointJob) -> None:
        print(f"noderun: sweep point {job.name} …", flush=True)

    def ended(job: PointJob, code: int) -> None:
        word = "ok" if code == 0 else f"exit {code}"
        print(f"noderun: point {job.name} {word} (log {job.log})", flush=True)

    return run_jobs(jobs, args.max_parallel, args.point_timeout, started, ended)


def _run_argv(args: argparse.Namespace, run_dir: Path) -> list[str]:
    """``run`` and the options every point shares (its script arguments follow)."""
    argv = ["run", f"--nnodes={args.nnodes}", f"--nproc-per-node={args.nproc_per_node}"]
    argv += [f"--run-dir={run_dir}", *(f"--notify={t}" for t in args.notify)]
    return argv


def _row(out: Path, point: Point, code: int | None, task: str | None) -> SweepRow:
    run_dir = out / point.name
    verdict = judge(run_dir, out / f"{point.name}.log", code)
    record = point_record(run_dir)
    return SweepRow(
        point=point,
        status=verdict.status,
        verdict=verdict.verdict,
        metrics=final_metrics(run_dir),
        finding=verdict.finding,
        run_dir=str(run_dir),
        job_id=task or ((record.job_id or "") if record else ""),
    )


def _report(args: argparse.Namespace, script: Path, out: Path, rows: list[SweepRow]) -> int:
    from noderun.sweep.plot import plot_metric

    (out / "sweep.csv").write_text(rows_csv(rows, args.metric))
    print(rows_text(rows, args.metric), end="")
    written = ["sweep.csv"]
    if args.metric:
        why = plot_metric(rows, args.metric, out / "sweep.png", f"{script.name}: {args.metric}")
        written += [] if why else ["sweep.png"]
        if why:
            print(f"noderun: {why}", file=sys.stderr)
    failed = [r.point.name for r in rows if not r.ok]
    print(f"noderun: sweep of {len(rows)} point(s) in {out}: {', '.join(written)}", flush=True)
    if failed:
        print(f"noderun: {len(failed)} point(s) failed: {', '.join(failed)}", file=sys.stderr)
    args.json_result = {  # printed by --json
        "verb": "sweep",
        "out": str(out),
        "files": written,
        "failed": failed,
        "points": [row_json(r) for r in rows],
    }
    if args.notify:
        notify.send(args.notify, {
            "event": "sweep_end" if not failed else "sweep_failure",
            "status": "completed" if not failed else "failed",
            "out": str(out),
            "points": [{"point": r.point.name, "status": r.status, "verify": r.verdict,
                        "metrics": dict(r.metrics), "cause": r.finding} for r in rows],
        })  # fmt: skip
    return 1 if failed else 0
