"""Which run directory a verb's target names: a path as given, or a SLURM job id's run directory.

No torch here: ``status``, ``logs`` and ``cancel`` of a job id import this, not the verifier.
"""

from __future__ import annotations

import re
from pathlib import Path

from noderun.backends import slurm
from noderun.backends.slurm_text import JOB_ID
from noderun.errors import UsageError
from noderun.explain.sources import run_dirs_of_job

_RUN_DIR_HINT = "pass a run directory (runs/<name>-…) or a SLURM job id"


def resolve_target(target: str) -> Path:
    """A run directory as given, or the run directory of a SLURM job id (its run.json names
    the job): searched beside the job's script and output, under ./runs and its workdir."""
    path = Path(target)
    if path.exists() or not JOB_ID.match(target):
        return path
    if not slurm.available():
        raise UsageError(f"{target} does not exist (and SLURM is not installed)", _RUN_DIR_HINT)
    record = slurm.job_record(target)
    if record is None:
        raise UsageError(f"unknown SLURM job id {target}", "check it with `sacct -j ID`")
    target = record.array_task or target  # an array task's own id: run.json names <array>_<task>
    paths = [Path(p) for p in record.paths()]
    for candidate in paths:
        for folder in (candidate.parent, candidate.parent.parent):
            # the run directory itself, or (a sweep's array: its output is the sweep's) a point's
            for run_json in [folder / "run.json", *sorted(folder.glob("*/run.json"))]:
                if _names_job(run_json, target):
                    return run_json.parent
    for named in _named_run_dirs(paths):  # a user's own batch script: where noderun said
        if _names_job(named / "run.json", target):
            return named
    for root in [Path.cwd(), *(p for p in paths if p.is_dir())]:
        found = run_dirs_of_job(root, target)
        if found:
            return found[-1]
    raise UsageError(
        f"no run directory of job {target} found (searched its script, output and runs/)",
        "pass the run directory `noderun submit` printed",
    )


# noderun's banner and last line ("…, run dir /x/y" / "run dir /x/y (check it …)"), and a
# batch script's own option (`srun noderun run --run-dir /x/y …`)
_SAID_RUN_DIR = re.compile(r"(?:\brun dir |--run[-_]dir[= ])['\"]?(/[^\s'\";,()]+)")
_SCANNED = 1 << 20  # of each file: a banner is near the top of the job's output


def _names_job(run_json: Path, job: str) -> bool:
    try:
        return run_json.is_file() and f'"job_id": "{job}"' in run_json.read_text(errors="replace")
    except OSError:
        return False


def _named_run_dirs(paths: list[Path]) -> list[Path]:
    """Run directories the job's script and output name, in order, each once."""
    named: dict[Path, None] = {}
    for path in paths:
        try:
            with path.open(errors="replace") as f:
                text = f.read(_SCANNED)
        except OSError:  # a folder, gone, unreadable
            continue
        named.update((Path(m.group(1)), None) for m in _SAID_RUN_DIR.finditer(text))
    return list(named)
