"""SLURM client side: what the cluster offers, sbatch, job polling, the sacct summary.

Polls ``scontrol show job -o ID`` rather than ``sbatch --wait`` (which polls every few
seconds); sacct records reach slurmdbd asynchronously, so the summary polls too.
"""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from noderun.errors import NoderunError, UsageError

SACCT_SUMMARY = "sacct_summary.txt"
SACCT_FIELDS = "JobID,JobName,State,ExitCode,Elapsed,NNodes,NodeList"

# SLURM job state -> noderun run status (a table, not an if-chain)
JOB_STATES: dict[str, str] = {
    "PENDING": "pending",
    "CONFIGURING": "pending",
    "REQUEUED": "pending",
    "REQUEUE_HOLD": "pending",
    "REQUEUE_FED": "pending",
    "RESV_DEL_HOLD": "pending",
    "RUNNING": "running",
    "COMPLETING": "running",
    "SUSPENDED": "running",
    "STAGE_OUT": "running",
    "SIGNALING": "running",
    "RESIZING": "running",
    "COMPLETED": "completed",
    "FAILED": "failed",
    "NODE_FAIL": "failed",
    "BOOT_FAIL": "failed",
    "OUT_OF_MEMORY": "failed",
    "DEADLINE": "failed",
    "TIMEOUT": "timeout",
    "CANCELLED": "cancelled",
    "PREEMPTED": "preempted",
    "REVOKED": "cancelled",
    "SPECIAL_EXIT": "failed",
}
FINAL = {"completed", "failed", "timeout", "cancelled", "preempted"}
_KEY_VALUE = re.compile(r"(\S+?)=(.*?)(?= \S+?=|\s*$)")


def _run(argv: Sequence[str], timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout)


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "no message")


def require_command(name: str) -> str:
    """The absolute path of a SLURM client command, or a UsageError saying where to run."""
    path = shutil.which(name)
    if path is None:
        raise UsageError(
            f"`{name}` not found on PATH: this machine is not a SLURM submit host",
            "run `noderun submit` on a login node of the cluster (or `module load slurm`); "
            "`noderun submit --dry-run` prints the script without submitting",
        )
    return path


@dataclasses.dataclass(frozen=True)
class PartitionInfo:
    """What one partition's nodes offer (from sinfo)."""

    name: str
    default: bool
    nodes: int
    max_cpus: int
    max_gpus: int


def _gpus(gres: str) -> int:
    """``gpu:a100:4(S:0-1),shard:2`` -> 4; ``(null)`` -> 0."""
    total = 0
    for item in gres.split(","):
        parts = item.split("(")[0].split(":")
        if parts[0] == "gpu" and parts[-1].isdigit():
            total = max(total, int(parts[-1]))
    return total


def partitions() -> list[PartitionInfo]:
    """Every partition with node count and the largest CPU/GPU count of its nodes."""
    result = _run([require_command("sinfo"), "-h", "-N", "-o", "%N|%P|%c|%G"])
    if result.returncode != 0:
        raise NoderunError(f"sinfo failed: {_first_line(result.stderr)}", "is slurmctld up?")
    nodes: dict[str, set[str]] = {}
    cpus: dict[str, int] = {}
    gpus: dict[str, int] = {}
    default: set[str] = set()
    for line in result.stdout.splitlines():
        fields = line.strip().split("|")
        if len(fields) != 4:
            continue
        node, raw_part, cpu_text, gres = fields
        name = raw_part.rstrip("*")
        if raw_part.endswith("*"):
            default.add(name)
        nodes.setdefault(name, set()).add(node)
        digits = re.match(r"\d+", cpu_text)
        cpus[name] = max(cpus.get(name, 0), int(digits.group()) if digits else 0)
        gpus[name] = max(gpus.get(name, 0), _gpus(gres))
    return [
        PartitionInfo(name, name in default, len(hosts), cpus[name], gpus[name])
        for name, hosts in nodes.items()
    ]


def pick_partition(name: str | None, available: Sequence[PartitionInfo]) -> PartitionInfo:
    """The named partition or the default one; a UsageError listing the valid ones."""
    listing = ", ".join(p.name + (" (default)" if p.default else "") for p in available)
    for part in available:
        if (name is None and part.default) or part.name == name:
            return part
    if name is None:
        raise UsageError("the cluster has no default partition", f"pass --partition: {listing}")
    raise UsageError(
        f"partition {name!r} does not exist", f"pass --partition with one of: {listing}"
    )


def sbatch(script: Path) -> str:
    """Submit ``script``; return the job id. sbatch's refusal becomes a one-line UsageError."""
    result = _run([require_command("sbatch"), "--parsable", str(script)], timeout=60)
    job_id = result.stdout.strip().split(";")[0]
    if result.returncode != 0 or not job_id.isdigit():
        raise UsageError(
            f"sbatch refused the job: {_first_line(result.stderr or result.stdout)}",
            "fix the option it names (`noderun submit --dry-run` shows the script)",
        )
    return job_id


@dataclasses.dataclass(frozen=True)
class JobState:
    """A job as scontrol (or sacct) sees it."""

    job_id: str
    state: str  # SLURM's word, e.g. COMPLETED
    exit_code: int | None = None
    signal: int | None = None
    nodes: str = ""
    reason: str = ""
    stdout: str = ""  # the batch script's output file (scontrol only; %j expanded)

    @property
    def status(self) -> str:
        return JOB_STATES.get(self.state.split()[0].rstrip("+"), "unknown")

    @property
    def final(self) -> bool:
        return self.status in FINAL

    @property
    def shell_exit_code(self) -> int:
        """What ``submit --wait`` returns: the batch exit code, 128+signal, 1 if unknown."""
        if self.signal:
            return 128 + self.signal
        if self.exit_code is not None and (self.exit_code or self.status == "completed"):
            return self.exit_code
        return 0 if self.status == "completed" else 1


def parse_scontrol_job(text: str) -> dict[str, str]:
    """``JobId=1 JobState=COMPLETED ExitCode=0:0 …`` (scontrol -o) -> dict."""
    return {m.group(1): m.group(2) for m in _KEY_VALUE.finditer(text.strip())}


def _exit_pair(text: str) -> tuple[int | None, int | None]:
    code, _, sig = text.partition(":")
    return (int(code) if code.isdigit() else None, int(sig) if sig.isdigit() else None)


def job_state(job_id: str) -> JobState | None:
    """scontrol's view (kept MinJobAge seconds after the end), else sacct's, else None."""
    result = _run(["scontrol", "show", "job", "-o", job_id])
    if result.returncode == 0 and result.stdout.strip():
        fields = parse_scontrol_job(result.stdout.splitlines()[0])
        code, sig = _exit_pair(fields.get("ExitCode", ""))
        return JobState(
            job_id=job_id,
            state=fields.get("JobState", "UNKNOWN"),
            exit_code=code,
            signal=sig,
            nodes=fields.get("NodeList", ""),
            reason=fields.get("Reason", ""),
            stdout=fields.get("StdOut", "").replace("%j", job_id),
        )
    result = _run(["sacct", "-n", "-X", "-P", "-j", job_id, "--format=State,ExitCode,NodeList"])
    line = _first_line(result.stdout) if result.returncode == 0 else ""
    if line.count("|") == 2:
        state, exit_text, nodes = line.split("|")
        code, sig = _exit_pair(exit_text)
        return JobState(job_id=job_id, state=state, exit_code=code, signal=sig, nodes=nodes)
    return None


def wait_for_job(
    job_id: str,
    poll: float = 0.25,
    on_change: Callable[[JobState], None] | None = None,
    on_poll: Callable[[], None] | None = None,
) -> JobState:
    """Poll until the job reaches a final state; report each state change."""
    last: str | None = None
    missing_since: float | None = None
    while True:
        state = job_state(job_id)
        if on_poll:
            on_poll()
        if state is None:
            missing_since = missing_since or time.monotonic()
            if time.monotonic() - missing_since > 30:
                raise NoderunError(
                    f"job {job_id} is no longer known to scontrol or sacct",
                    "it ended more than MinJobAge ago without accounting; see its run directory",
                )
        else:
            if state.state != last and on_change:
                on_change(state)
            last = state.state
            if state.final:
                return state
        time.sleep(poll)


def _sacct_rows(job_id: str) -> tuple[list[list[str]] | None, str]:
    result = _run(["sacct", "-P", "-j", job_id, f"--format={SACCT_FIELDS}"])
    if result.returncode != 0:
        return None, _first_line(result.stderr or result.stdout)
    rows = [line.split("|") for line in result.stdout.splitlines() if line.strip()]
    return rows, ""


def _settled(rows: list[list[str]], job_final: bool) -> bool:
    """True once the records we care about are final (steps, and the job when it ended)."""
    body = rows[1:]
    if not body:
        return False
    steps = [r for r in body if "." in r[0] and r[0].split(".")[1][:1].isdigit()]
    wanted = body if job_final else steps
    return bool(wanted) and all(JOB_STATES.get(r[2].split()[0], "") in FINAL for r in wanted)


def sacct_summary(job_id: str, job_final: bool, timeout: float = 15.0) -> str:
    """A fixed-width table of the job's and steps' states, or a note that sacct is missing."""
    if shutil.which("sacct") is None:
        return f"accounting not available for job {job_id}: `sacct` is not installed here\n"
    deadline = time.monotonic() + timeout
    rows, error = _sacct_rows(job_id)
    while rows is not None and not _settled(rows, job_final) and time.monotonic() < deadline:
        time.sleep(0.5)  # records reach slurmdbd asynchronously
        rows, error = _sacct_rows(job_id)
    if rows is None:
        state = job_state(job_id)
        seen = f"scontrol says {state.state}, exit code {state.exit_code}" if state else ""
        return f"accounting not available for job {job_id}: {error}\n{seen}\n".rstrip() + "\n"
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows]
    note = "" if _settled(rows, job_final) else " (some records were still arriving)"
    return f"sacct for job {job_id}{note}\n" + "\n".join(line.rstrip() for line in lines) + "\n"


def write_sacct_summary(run_dir: Path, job_id: str, job_final: bool) -> Path:
    path = run_dir / SACCT_SUMMARY
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(sacct_summary(job_id, job_final))
    tmp.replace(path)
    return path


_LABELLED = re.compile(r"^\s*(\d+): ?(.*)$")


def run_on_job_nodes(
    job_id: str, nodes: Sequence[str], argv: Sequence[str], timeout: float = 120
) -> tuple[list[tuple[int, str]], str]:
    """Run ``argv`` once on each of the running job's ``nodes``, beside its steps
    (``srun --overlap``); return (task, line) for every output line, and srun's error text."""
    srun = require_command("srun")
    command = [
        srun,
        "--overlap",
        f"--jobid={job_id}",
        f"--nodes={len(nodes)}",
        f"--ntasks={len(nodes)}",
        "--ntasks-per-node=1",
        f"--nodelist={','.join(nodes)}",
        "--kill-on-bad-exit=0",
        "--label",
        "--quiet",
        *argv,
    ]
    try:
        done = _run(command, timeout=timeout)
    except subprocess.TimeoutExpired:
        return [], f"srun --overlap on job {job_id} took over {timeout:g} s"
    lines = []
    for line in done.stdout.splitlines():
        if match := _LABELLED.match(line):
            lines.append((int(match.group(1)), match.group(2)))
    error = "" if done.returncode == 0 else _first_line(done.stderr or done.stdout)
    return lines, error
