"""``noderun check JOB.sbatch``: launch mistakes of a hand-written batch script, before sbatch."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from noderun.cli_output import print_json
from noderun.errors import UsageError
from noderun.verbs.options import OptionTable, positional, switch, value

OPTIONS = OptionTable(
    "check",
    (
        positional("scripts", nargs="+", metavar="SCRIPT", help="batch script(s) to check"),
        switch(
            "--json",
            help='print the findings as JSON: {"schema": 1, "files": {SCRIPT: [finding, …]}}',
        ),
        value(
            "--submit-dir",
            metavar="DIR",
            env=False,
            help="directory you will run sbatch from: relative --output folders and training "
            "script paths are looked up there and beside the script (default: the current "
            "directory)",
        ),
        switch(
            "--no-file-checks",
            help="do not look up the folders and files the script names (check elsewhere "
            "than where you submit)",
        ),
    ),
    help="find launch mistakes in a batch script before you submit it",
    description="Read a hand-written sbatch script and print each launch mistake as "
    "FILE:LINE: problem; fix: a bare python where several tasks are asked for (no srun), "
    "one torchrun for a multi-node job, $SLURM_NODEID expanded by the batch shell, a fixed "
    "MASTER_PORT (warning), GPUs per node that differ from tasks per node, "
    "CUDA_VISIBLE_DEVICES set from the global rank, a launcher (torchrun, accelerate, "
    "deepspeed) started once per task instead of once per node, the same --node_rank on "
    "every node, a variable a per-task shell reads but the batch script never exported, an "
    "#SBATCH --output folder that does not exist when sbatch opens it, a training script "
    "that does not exist. The script is read as bash reads it (continuations, variables, "
    "heredocs, functions, bash -c strings). A script that is not bash (Python, csh) is "
    "named as such and not checked. Exit 0 when clean (warnings allowed), 1 on errors, 2 "
    "when a script cannot be read: `noderun check job.sbatch && sbatch job.sbatch`.",
)


def main(args: argparse.Namespace) -> int:
    from noderun.check import Severity, lint_sbatch, script_language

    texts = {name: _read(name) for name in args.scripts}
    submit_dir = None if args.no_file_checks else Path(args.submit_dir or ".").resolve()
    if submit_dir is not None and not submit_dir.is_dir():
        raise UsageError(
            f"--submit-dir {args.submit_dir} is not a directory", "name the folder you submit from"
        )
    languages = {name: script_language(text) for name, text in texts.items()}
    results = {
        name: lint_sbatch(
            text,
            script_path=None if submit_dir is None else Path(name).resolve(),
            submit_dir=submit_dir,
        )
        for name, text in texts.items()
    }
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
            if not texts[name].strip():
                print(f"{name}: empty, nothing to check")
                continue
            if languages[name] != "bash":
                print(
                    f"{name}: not a bash batch script ({languages[name]}); noderun check reads "
                    "bash scripts only, nothing checked"
                )
                continue
            for finding in findings:
                print(finding.render(name))
            if not findings:
                print(f"{name}: no launch mistakes found")
    errors = sum(f.severity is Severity.ERROR for fs in results.values() for f in fs)
    sys.stdout.flush()
    return 1 if errors else 0


_MAX_BYTES = 4 * 1024 * 1024  # far above any batch script; a bigger file is something else


def _read(name: str) -> str:
    path = Path(name)
    try:
        size = path.stat().st_size
        if size > _MAX_BYTES and path.is_file():
            raise UsageError(
                f"{name} is {size // (1024 * 1024)} MB, not a batch script",
                "pass the sbatch script itself",
            )
        data = path.read_bytes()
    except FileNotFoundError:
        raise UsageError(f"no such batch script: {name}", "check the path") from None
    except IsADirectoryError:
        raise UsageError(
            f"{name} is a directory, not a batch script", "name the .sbatch file"
        ) from None
    except OSError as err:
        raise UsageError(
            f"cannot read {name}: {err.__class__.__name__}", "pass a readable text batch script"
        ) from None
    if b"\x00" in data:
        raise UsageError(f"{name} is binary, not a batch script", "pass the sbatch script itself")
    # bash reads bytes: a comment in Latin-1 is no reason to refuse the script
    return data.decode("utf-8", errors="replace")
