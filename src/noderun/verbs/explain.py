"""``noderun explain LOG…``: root cause, evidence line (file:line) and fix of a failed run."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from noderun.cli_output import print_json
from noderun.verbs.options import OptionTable, positional, switch, value

if TYPE_CHECKING:
    from noderun.explain import Finding, Verdict


LAST_LINES_SHOWN = 16

OPTIONS = OptionTable(
    "explain",
    (
        positional(
            "targets", nargs="+", metavar="LOG", help="log file, directory, run dir, or job id"
        ),
        switch("--json", help="print the findings as JSON"),
        value(
            "--quiet-for",
            type=float,
            default=20.0,
            metavar="SECONDS",
            env=False,
            help="a running job whose start-up log shows fewer ranks than it announced and "
            "nothing for this long is reported as hanging (missing launcher)",
        ),
    ),
    help="say why a run failed: root cause, evidence line, fix",
    description="Read logs (files, directories, a run directory, or a SLURM job id), "
    "streaming in constant memory, and print the root cause, the evidence line with file "
    "and line number, and the fix; other findings follow, first failure in time first. A log "
    "of a run that finished says so (no failure found) with what it saw; warnings are "
    "listed as warnings. A failure no known cause fits is called unclassified, with the first "
    "error-level line in time and each log's last line. Exit 1 when a failure was found, "
    "0 when none, 2 for bad input.",
)


def main(args: argparse.Namespace) -> int:
    from noderun.explain import Verdict, examine
    from noderun.explain.running import running_job_hangs

    hangs = [f for t in args.targets if (f := running_job_hangs(t, args.quiet_for))]
    verdict = Verdict(hangs, [], [], finished=False) if hangs else examine(args.targets)
    if args.json:
        print_json(verdict.to_dict())
    else:
        print_verdict(verdict)
    return 1 if verdict.failed else 0


def print_verdict(verdict: Verdict) -> None:
    if verdict.failures:
        root, *others = verdict.failures
        if verdict.unclassified:
            print(f"root cause: unclassified (no known cause fits): {root.summary}")
        else:
            print(f"root cause: {root.cause}: {root.summary}")
        print(f"  evidence: {_where(root)}")
        print(f"            {root.evidence.text}")
        print(f"  fix:      {root.fix}")
        if verdict.failed_rank:  # the launcher's record: which rank, on which node and host
            print(f"  failed:   {verdict.failed_rank}")
        _print_last_lines(verdict)
        for finding in others:
            print(f"also: {finding.cause}: {finding.summary}")
            print(f"  evidence: {_where(finding)}: {finding.evidence.text}")
            print(f"  fix:      {finding.fix}")
    elif verdict.finished:
        print("no failure found: the run finished")
    else:
        print("no failure found: no line matches a known failure signature")
    for attempt in verdict.attempts:
        print(attempt)
    for seen in verdict.seen:
        where = _place(seen.evidence.file, seen.evidence.line, seen.occurrences)
        print(f"seen: {seen.what}: {where}: {seen.evidence.text[:160]}")
    for warning in verdict.warnings:
        print(f"warning: {warning.cause}: {warning.summary}")
        print(f"  evidence: {_where(warning)}: {warning.evidence.text[:200]}")
    sys.stdout.flush()


def _print_last_lines(verdict: Verdict) -> None:
    if not verdict.last_lines:
        return
    print("  last line of each log:")
    for evidence in verdict.last_lines[:LAST_LINES_SHOWN]:
        print(f"    {evidence.file}:{evidence.line}: {evidence.text[:200]}")
    if len(verdict.last_lines) > LAST_LINES_SHOWN:
        more = len(verdict.last_lines) - LAST_LINES_SHOWN
        print(f"    … and {more} more logs (--json lists all)")


def _where(finding: Finding) -> str:
    return _place(finding.evidence.file, finding.evidence.line, finding.occurrences)


def _place(file: str, line: int, occurrences: int) -> str:
    extra = f" (seen {occurrences} times)" if occurrences > 1 else ""
    return f"{file}{f':{line}' if line else ''}{extra}"
