"""``noderun explain LOG…``: root cause, evidence line (file:line) and fix of a failed run."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from noderun.verbs.options import OptionTable, add_verb, positional, switch, value

if TYPE_CHECKING:
    from noderun.explain import Finding


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
)


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    add_verb(
        sub,
        OPTIONS,
        main,
        help="say why a run failed: root cause, evidence line, fix",
        description="Read logs (files, directories, a run directory, or a SLURM job id), "
        "streaming in constant memory, and print the root cause, the evidence line with file "
        "and line number, and the fix; other findings follow, first failure in time first.",
    )


def main(args: argparse.Namespace) -> int:
    from noderun.explain import explain
    from noderun.explain.running import running_job_hangs

    hangs = [f for t in args.targets if (f := running_job_hangs(t, args.quiet_for))]
    findings = hangs or explain(args.targets)
    if args.json:
        print(json.dumps({"findings": [f.to_dict() for f in findings]}, indent=2))
    else:
        print_findings(findings)
    return 0


def print_findings(findings: list[Finding]) -> None:
    if not findings:
        print("no failure found: no line matches a known failure signature")
        return
    root, *others = findings
    print(f"root cause: {root.cause}: {root.summary}")
    print(f"  evidence: {_where(root)}")
    print(f"            {root.evidence.text}")
    print(f"  fix:      {root.fix}")
    for finding in others:
        print(f"also: {finding.cause}: {finding.summary}")
        print(f"  evidence: {_where(finding)}: {finding.evidence.text}")
        print(f"  fix:      {finding.fix}")
    sys.stdout.flush()


def _where(finding: Finding) -> str:
    extra = f" (seen {finding.occurrences} times)" if finding.occurrences > 1 else ""
    line = f":{finding.evidence.line}" if finding.evidence.line else ""
    return f"{finding.evidence.file}{line}{extra}"
