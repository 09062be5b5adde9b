"""``noderun check JOB.sbatch``: launch mistakes of a hand-written batch script, before sbatch."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from noderun.cli_output import print_json
from noderun.errors import UsageError
from noderun.verbs.options import OptionTable, add_verb, positional, switch

OPTIONS = OptionTable(
    "check",
    (
        positional("scripts", nargs="+", metavar="SCRIPT", help="batch script(s) to check"),
        switch(
            "--json",
            help='print the findings as JSON: {"schema": 1, "files": {SCRIPT: [finding, …]}}',
        ),
    ),
)


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    add_verb(
        sub,
        OPTIONS,
        main,
        help="find launch mistakes in a batch script before you submit it",
        description="Read a hand-written sbatch script and print each launch mistake as "
        "FILE:LINE: problem; fix: a bare python where several tasks are asked for (no srun), "
        "one torchrun for a multi-node job, $SLURM_NODEID expanded by the batch shell, a fixed "
        "MASTER_PORT (warning), GPUs per node that differ from tasks per node, "
        "CUDA_VISIBLE_DEVICES set from the global rank. Exit 0 when clean (warnings allowed), "
        "1 on errors, 2 when a script cannot be read: `noderun check job.sbatch && sbatch "
        "job.sbatch`.",
    )


def main(args: argparse.Namespace) -> int:
    from noderun.check import Severity, lint_sbatch

    texts = {name: _read(name) for name in args.scripts}
    results = {name: lint_sbatch(text) for name, text in texts.items()}
    if args.json:
        files = {
            name: [
                {
                    "line": f.line,
                    "severity": f.severity.value,
                    "code": f.code,
                    "problem": f.problem,
                    "fix": f.fix,
                }
                for f in findings
            ]
            for name, findings in results.items()
        }
        print_json({"files": files})
    else:
        for name, findings in results.items():
            for finding in findings:
                print(finding.render(name))
            if not findings:
                print(f"{name}: no launch mistakes found")
    errors = sum(f.severity is Severity.ERROR for fs in results.values() for f in fs)
    sys.stdout.flush()
    return 1 if errors else 0


def _read(name: str) -> str:
    path = Path(name)
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"no such batch script: {name}", "check the path") from None
    except IsADirectoryError:
        raise UsageError(
            f"{name} is a directory, not a batch script", "name the .sbatch file"
        ) from None
    except (OSError, UnicodeDecodeError) as err:
        raise UsageError(
            f"cannot read {name}: {err.__class__.__name__}", "pass a readable text batch script"
        ) from None
