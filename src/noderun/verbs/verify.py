"""``noderun verify RUN_DIR``: PASS/FAIL per check of a finished run; exit 0 healthy, 1 not."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from noderun.cli_output import print_json
from noderun.verbs.options import (
    OptionTable,
    positional,
    positive_int,
    refuse_unless_applies,
    repeated,
    switch,
    value,
)

if TYPE_CHECKING:
    from noderun.verify import Report


OPTIONS = OptionTable(
    "verify",
    (
        positional(
            "target",
            metavar="RUN_DIR|JOB_ID",
            help="run directory of a finished run, or its job id",
        ),
        switch("--json", help="print the report as JSON"),
        switch("--timeline", help="also print where the job's time went, stage by stage"),
        switch(
            "--summary",
            help="also write EXECUTION_SUMMARY.md (+ losses.png) in the run directory",
        ),
        value("--world-size", type=positive_int, env=False, help="expected ranks [run.json]"),
        value(
            "--nnodes",
            "--nodes",
            type=positive_int,
            env=False,
            help="expected nodes (default: run.json); --nodes is the same option",
        ),
        value("--backend", choices=("gloo", "nccl"), env=False, help="expected backend"),
        value("--epochs", type=positive_int, env=False, help="expected epochs completed"),
        repeated("--skip", metavar="CHECK", help="skip a check (repeatable)"),
        repeated(
            "--require",
            metavar="CHECK[,CHECK]",
            help="fail when a check finds nothing to judge (e.g. metrics,checkpoint); by default "
            "a script that does not use noderun's runtime gets SKIP for what it did not leave",
        ),
    ),
    help="check that a finished run is healthy (PASS/FAIL per check)",
    description="Check a run directory: run.json and its exit status, runtime.json, "
    "world size and backend as asked, metrics.csv (epochs increasing, losses finite), "
    "the final checkpoint loads, no rank with errors; under SLURM also sacct_summary.txt and "
    "the job's final state. A script that does not call noderun.init() is judged from what "
    "it left (the launcher's exit codes, its logs, Lightning's metrics, its checkpoints): "
    "what needs noderun's runtime says SKIP and why. Exit 0 healthy, 1 not, 2 bad input.",
)


def main(args: argparse.Namespace) -> int:
    # imported here: `noderun --help` must not pay for importing torch
    from noderun.errors import UsageError
    from noderun.verify import Expectations, verify_run_dir
    from noderun.verify.plain_job import verify_if_plain
    from noderun.verify.target import resolve_target
    from noderun.verify.verifier import CHECK_NAMES

    if args.json:  # the JSON report has no table: run.json holds the timeline
        refuse_unless_applies(
            args, ("timeline",), "prints a table, not JSON", "drop --json, or read run.json"
        )
    required = {name for item in args.require for name in item.split(",") if name}
    for flag, names in (("--skip", set(args.skip)), ("--require", required)):
        unknown = sorted(names - set(CHECK_NAMES))
        if unknown:
            raise UsageError(
                f"unknown check {', '.join(unknown)}", f"{flag} takes {', '.join(CHECK_NAMES)}"
            )
    expect = Expectations(
        world_size=args.world_size,
        nnodes=args.nnodes,
        backend=args.backend,
        epochs=args.epochs,
        skip=frozenset(args.skip),
        require=frozenset(required),
    )
    if (code := verify_if_plain(args.target, expect, print_report, args.json)) is not None:
        return code  # a SLURM job that noderun did not start: judged from what SLURM knows
    run_dir = resolve_target(args.target)
    report = verify_run_dir(run_dir, expect)
    if args.json:
        print_json(report.to_dict())
    else:
        print_report(report)
        print_profile(run_dir)
        if args.timeline:
            print_timeline(run_dir)
    if args.summary:
        from noderun.verify.summary import write_summary

        path = write_summary(run_dir, report)
        print(f"summary: {path}", file=sys.stderr if args.json else sys.stdout, flush=True)
    return 0 if report.healthy else 1


def print_timeline(run_dir: Path) -> None:
    """run.json's stage timestamps, seconds from the first (launch start or submission)."""
    from noderun import rundir, timeline

    try:
        record = rundir.read_json(run_dir / rundir.RUN_JSON)
    except (OSError, ValueError):
        return  # the report above already says what is wrong with run.json
    print()
    print("timeline (s from the start; first and last process to reach each stage):")
    for line in timeline.table(list(record.get("timeline") or [])):
        print(f"  {line}")


def print_profile(run_dir: Path) -> None:
    """The per-rank step-time table of a run started with ``--profile`` (nothing otherwise)."""
    from noderun.verify.profile_report import load_profiles, render

    profiles = load_profiles(run_dir)
    if profiles:
        print()
        print(render(profiles), end="", flush=True)


def print_report(report: Report) -> None:
    from noderun.cli_output import print_table

    rows = [
        (c.name, c.status.value, c.detail + (f" (fix: {c.fix})" if c.fix else ""))
        for c in report.checks
    ]
    print_table(f"noderun verify {report.target}", ("check", "status", "detail"), rows)
    if report.facts:
        print("  ".join(f"{k}={_fact(v)}" for k, v in report.facts.items()))
    failures = sum(1 for c in report.checks if c.status.value == "FAIL")
    skips = sum(1 for c in report.checks if c.status.value == "SKIP")
    if report.healthy:
        print(f"verdict: HEALTHY{f' ({skips} check(s) skipped: see why above)' if skips else ''}")
    else:
        print(f"verdict: NOT HEALTHY ({failures} check(s) failed)")
        if report.failed_run:
            print(f"the run failed: run `noderun explain {report.target}` for the cause and fix")
    sys.stdout.flush()


def _fact(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return str(value)
