"""``noderun stacks RUN_DIR|JOB_ID``: every live rank's Python stack, grouped, straggler named."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from noderun import rundir
from noderun.cli_output import print_json
from noderun.errors import NoderunError, UsageError
from noderun.stacks import Kind, Snapshot, render
from noderun.verbs.options import (
    OptionTable,
    positional,
    refuse_unless_applies,
    switch,
)

_JOB_ID = re.compile(r"^\d+$")


OPTIONS = OptionTable(
    "stacks",
    (
        positional("target", metavar="RUN_DIR|JOB_ID", help="run directory or SLURM job id"),
        switch("--full", help="print every group's whole stack"),
        switch("--json", help="print the stacks as JSON"),
    ),
    help="print the Python stack of every live rank of a running job, grouped",
    description="Take the stack of every live rank (py-spy; faulthandler for scripts that "
    "call noderun.init() when py-spy cannot attach), on this machine or on every node of a "
    "SLURM job (srun --overlap), and group ranks with the same stack.",
)


def take(target: str) -> tuple[Snapshot, str]:
    """The snapshot of ``target`` and what it is (for messages)."""
    from noderun.stacks import job

    path = Path(target)
    if path.is_dir():
        run_json = path / rundir.RUN_JSON
        record = rundir.read_json(run_json) if run_json.is_file() else {}
        job_id = str(record.get("job_id") or "")
        if record.get("backend") == "slurm" and job_id:
            return job.job_snapshot(job_id, path.resolve()), f"run {path} (SLURM job {job_id})"
        return job.local_snapshot(path.resolve()), f"run {path}"
    if _JOB_ID.match(target):
        return job.job_snapshot(target), f"SLURM job {target}"
    raise UsageError(f"{target} is neither a run directory nor a job id", "pass RUN_DIR or JOB_ID")


def main(args: argparse.Namespace) -> int:
    if args.json:  # the JSON has every rank's whole stack already
        refuse_unless_applies(args, ("full",), "is for the text report: --json has every "
                              "rank's whole stack", "drop --full")  # fmt: skip
    snapshot, what = take(args.target)
    if not snapshot.stacks:
        raise NoderunError(
            f"no live rank of {what} found"
            + (" on this machine" if "SLURM" not in what else " on its nodes"),
            "is the job still running? (`noderun explain` reads an ended one); ranks are "
            "found by their NODERUN__RUN_DIR and RANK variables, so run this as their user",
        )
    for note in snapshot.notes:
        print(f"noderun: {note}", file=sys.stderr)
    if args.json:
        print_json(snapshot.to_dict())
        return 0
    sources = sorted({s.source for s in snapshot.stacks if s.source}) or ["none"]
    print(f"stacks of {len(snapshot.stacks)} rank(s) of {what} ({', '.join(sources)}):")
    for line in render(snapshot, full=args.full).splitlines():
        print(f"  {line}")
    verdict = snapshot.verdict()
    if verdict.kind in (Kind.STRAGGLER, Kind.DEADLOCK):
        print(f"if the job is stuck: {verdict.line()}")
    return 0
