"""Turn ``noderun explain`` arguments (files, directories, run directories, SLURM job ids)
into an ordered list of log files, plus what the run directory itself knows."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from noderun import failures, rundir
from noderun.backends import slurm
from noderun.backends.slurm_text import JOB_ID
from noderun.errors import UsageError
from noderun.explain.findings import Evidence, Finding
from noderun.explain.scanner import is_binary
from noderun.explain.signatures import CAUSES, Tier

LOG_SUFFIXES = (".log", ".out", ".err", ".txt")
_RANK_LOG = re.compile(r"^rank(\d+)\.log$")


@dataclasses.dataclass
class Sources:
    """The files to scan, in order, and facts gathered on the way."""

    files: list[Path] = dataclasses.field(default_factory=list)
    time_hints: dict[Path, float] = dataclasses.field(default_factory=dict)
    # a known failure with no log line to show for it (run.json, sacct): (file, text)
    failures: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    # the run is known to have ended well (run.json completed, SLURM COMPLETED): (file, text)
    succeeded: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    # how each attempt of a restarted or continued run ended (run.json's attempts)
    attempts: list[str] = dataclasses.field(default_factory=list)
    # which rank failed where, as the launcher recorded it (run.json): "rank 3 (node 1 on h…"
    failed_rank: str | None = None
    # causes the run's own records prove (stopped from outside, no output file): first
    known: list[Finding] = dataclasses.field(default_factory=list)
    _seen: set[Path] = dataclasses.field(default_factory=set, repr=False)

    def add(self, path: Path) -> None:
        if path not in self._seen:  # a set: 10,000 rank logs must not cost 10,000^2 compares
            self._seen.add(path)
            self.files.append(path)


def collect(targets: Sequence[str]) -> Sources:
    """Resolve every argument; a missing, unreadable, empty or binary one is a UsageError."""
    sources = Sources()
    for target in targets:
        path = Path(target)
        if path.is_dir():
            _add_directory(sources, path)
        elif path.exists():
            _add_file(sources, path, explicit=True)
        elif JOB_ID.match(target):
            _add_slurm_job(sources, target)
        else:
            raise UsageError(f"{target} does not exist", "pass log files, a directory or a job id")
    return sources


def _add_file(sources: Sources, path: Path, explicit: bool) -> bool:
    if explicit and not path.is_file():  # a FIFO or a device: reading could block or never end
        raise UsageError(f"{path} is not a regular file", "pass a log file or a directory")
    try:
        if explicit and path.stat().st_size == 0:
            raise UsageError(f"{path} is empty: nothing to explain", "pass the log with output")
        binary = is_binary(path)
    except OSError as err:
        raise UsageError(
            f"cannot read {path}: {err.strerror}", "check the path and its permissions"
        ) from None
    if binary:
        if explicit:
            raise UsageError(f"{path} is a binary file, not a log", "pass a text log")
        return False
    sources.add(path)
    return True


def _add_directory(sources: Sources, directory: Path) -> None:
    """Every text log below ``directory``; a run directory adds its run.json and rank errors."""
    candidates = sorted(p for p in directory.rglob("*") if p.is_file() and p.suffix in LOG_SUFFIXES)
    # rank logs first, in rank order: the torchelastic copies of the same lines come after
    candidates.sort(key=lambda p: (not _RANK_LOG.match(p.name), _rank_of(p), str(p)))
    added = [p for p in candidates if _add_file(sources, p, explicit=False)]
    found_run = _add_run_facts(sources, directory)
    if not added and not found_run:
        raise UsageError(
            f"{directory} holds no log files ({', '.join(LOG_SUFFIXES)})",
            "pass a run directory, a log file or a SLURM job id",
        )


def _rank_of(path: Path) -> int:
    match = _RANK_LOG.match(path.name)
    return int(match.group(1)) if match else -1


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def failed_rank(run: dict[str, Any]) -> str | None:
    """The failed rank, its node and host from a run.json record, or None::

    rank 3 (node 1 on sshhost2, local rank 1): killed by SIGKILL
    """
    failure = run.get("failure") or {}
    return failures.describe(failure, run.get("hosts") or []) if failure else None


def _add_run_facts(sources: Sources, directory: Path) -> bool:
    """Rank error times become time hints for their logs; a failed run.json is a failure."""
    for error in sorted(directory.glob("logs/rank*.error.json")):
        record = _read_json(error)
        if isinstance(record.get("time"), int | float):
            sources.time_hints[error.with_name(error.name.replace(".error.json", ".log"))] = float(
                record["time"]
            )
    run = _read_json(directory / "run.json")
    sources.attempts += rundir.attempt_lines(run)
    if run.get("status") == "cancelled":  # `noderun cancel`: whatever the ranks' ends say
        sources.known.append(
            _known(
                "cancelled",
                "the run was cancelled by `noderun cancel`; no rank failed on its own",
                "nothing to fix if that was meant; the same command continues it (with the "
                "script's --resume auto, from the latest checkpoint)",
                str(directory / "run.json"),
                "run cancelled",
            )
        )
        return True
    if run.get("interrupted_by"):  # Ctrl-C or a signal to the launcher: not a rank's failure
        sources.known.append(
            _known(
                "interrupted",
                f"the run was stopped by {run['interrupted_by']} sent to the launcher (Ctrl-C, "
                "kill, scancel); no rank failed on its own",
                "nothing to fix if that was meant; resume with `noderun run --resume` (the "
                "latest checkpoint)",
                str(directory / "run.json"),
                f"run {run.get('status')}: interrupted by {run['interrupted_by']}",
            )
        )
    if run.get("status") in ("failed", "interrupted") or run.get("exit_code") not in (None, 0):
        where = failed_rank(run)
        sources.failed_rank = sources.failed_rank or where
        text = f"run {run.get('status')}: " + (where or f"exit code {run.get('exit_code')}")
        sources.failures.append((str(directory / "run.json"), text))
    elif run.get("status") == "completed":
        sources.succeeded.append((str(directory / "run.json"), "run completed, exit code 0"))
    elif run.get("status") == "running" and (died := rundir.stale_lock(directory)):
        sources.failures.append((str(directory / "run.json"), f"run not finished: {died}"))
    return bool(run)


def _add_slurm_job(sources: Sources, job_id: str) -> None:
    """The job's stdout/stderr files (scontrol, else sacct) and its run directory if any."""
    if not slurm.available():
        raise UsageError(f"{job_id} is not a file, and SLURM is not installed", "pass a log path")
    record = slurm.job_record(job_id)
    if record is None:
        raise UsageError(f"unknown SLURM job id {job_id}", "check it with `sacct -j ID`")
    state = record.state
    for name in record.output_files():
        if Path(name).is_file():
            _add_file(sources, Path(name), explicit=False)
        elif state.final and state.status != "completed":
            sources.known.append(_missing_output(job_id, Path(name)))
    if state.status == "completed":
        sources.succeeded.append((f"job {job_id}", f"SLURM job {job_id} ended {state.state}"))
    elif state.final:
        sources.failures.append((f"job {job_id}", f"SLURM job {job_id} ended {state.state}"))
    for run_dir in run_dirs_of_job(Path(record.workdir or "."), job_id):
        _add_directory(sources, run_dir)
    if not sources.files and not sources.failures and not sources.succeeded:
        raise UsageError(
            f"SLURM job {job_id} left no log files that can be read here",
            "pass the job's output files or run directory instead",
        )


def _known(cause: str, summary: str, fix: str, where: str, text: str) -> Finding:
    return Finding(cause, summary, fix, Evidence(where, 0, text), Tier.ROOT, None)


def _missing_output(job_id: str, path: Path) -> Finding:
    """SLURM opens a job's output file before the script runs: a folder made by the script
    itself comes too late, and the job fails with no output at all."""
    folder = path.parent
    now = "does not exist" if not folder.is_dir() else "exists now (made by the script, too late)"
    return _known(
        "storage-missing",
        f"job {job_id}'s output file {path} was never written: its folder {folder} {now}",
        f"create {folder} before sbatch (`mkdir -p {folder}`), or point #SBATCH --output at a "
        "folder that exists",
        f"job {job_id}",
        f"{CAUSES['storage-missing']}: {path}",
    )


def run_dirs_of_job(workdir: Path, job_id: str) -> list[Path]:
    """Run directories whose run.json names this job (``noderun submit`` writes job_id)."""
    found = []
    wanted = (job_id, job_id.split("_")[0])  # an array task's own id, or the array's
    for run_json in sorted([*workdir.glob("runs/*/run.json"), *workdir.glob("runs/*/*/run.json")]):
        record = _read_json(run_json)
        if str(record.get("job_id", "")) in wanted:
            found.append(run_json.parent)
    return found
