"""The SLURM client: every call to sbatch, srun (captured steps), scontrol, sacct and sinfo.

Their output is parsed by the pure functions of ``slurm_text``. Polls ``scontrol show job -o
ID`` rather than ``sbatch --wait`` (which polls every few seconds); sacct records reach
slurmdbd asynchronously, so the summary polls too. Imports nothing heavy: the runtime (inside
every rank) and the per-node entrypoint use it too.
"""

from __future__ import annotations

import contextlib
import dataclasses
import queue
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from noderun import atomic
from noderun.backends.slurm_text import (
    FINAL,
    JOB_FIELDS,
    JOB_STATES,
    SACCT_FIELDS,
    JobRecord,
    JobState,
    format_table,
    job_row_nodes_late,
    parse_labelled,
    parse_sacct_job,
    parse_sacct_rows,
    parse_scontrol_job,
    parse_sinfo_nodes,
    sacct_settled,
    submit_output_files,
    submit_script,
)
from noderun.errors import NoderunError, UsageError
from noderun.topology.hostlist import expand_hostlist

SACCT_SUMMARY = "sacct_summary.txt"

__all__ = [
    "FINAL",
    "JOB_STATES",
    "SACCT_FIELDS",
    "SACCT_SUMMARY",
    "JobRecord",
    "JobState",
    "PartitionInfo",
    "available",
    "hostnames",
    "job_record",
    "job_requeueable",
    "job_state",
    "max_array_size",
    "parse_scontrol_job",
    "partitions",
    "pick_partition",
    "requeue",
    "require_command",
    "run_on_job_nodes",
    "sacct_summary",
    "sbatch",
    "sbatch_test",
    "scancel",
    "wait_for_job",
    "write_sacct_summary",
]


def _run(argv: Sequence[str], timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout)


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "no message")


def available() -> bool:
    """SLURM's client commands are installed here (scontrol or sacct)."""
    return shutil.which("scontrol") is not None or shutil.which("sacct") is not None


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


def partitions() -> list[PartitionInfo]:
    """Every partition with node count and the largest CPU/GPU count of its nodes."""
    result = _run([require_command("sinfo"), "-h", "-N", "-o", "%N|%P|%c|%G"])
    if result.returncode != 0:
        raise NoderunError(f"sinfo failed: {_first_line(result.stderr)}", "is slurmctld up?")
    nodes: dict[str, set[str]] = {}
    cpus: dict[str, int] = {}
    gpus: dict[str, int] = {}
    default: set[str] = set()
    for node, raw_part, node_cpus, node_gpus in parse_sinfo_nodes(result.stdout):
        name = raw_part.rstrip("*")
        if raw_part.endswith("*"):
            default.add(name)
        nodes.setdefault(name, set()).add(node)
        cpus[name] = max(cpus.get(name, 0), node_cpus)
        gpus[name] = max(gpus.get(name, 0), node_gpus)
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


def max_array_size() -> int | None:
    """The cluster's MaxArraySize (``scontrol show config``): array task ids stay below it;
    None when scontrol cannot say."""
    try:
        done = _run(["scontrol", "show", "config"])
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in done.stdout.splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "MaxArraySize" and value.strip().isdigit():
            return int(value.strip())
    return None


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


def sbatch_test(script_text: str, meanwhile: Callable[[], object] | None = None) -> str:
    """``sbatch --test-only`` of the script (read from stdin: nothing is written or queued);
    sbatch's words on success, its refusal as a one-line UsageError. ``meanwhile()`` runs
    while sbatch works (the checks of sinfo's answers: the two round trips overlap); what it
    raises comes first."""
    argv = [require_command("sbatch"), "--test-only"]
    outcome: list[subprocess.CompletedProcess[str] | BaseException] = []

    def test() -> None:
        try:
            outcome.append(
                subprocess.run(argv, input=script_text, capture_output=True, text=True, timeout=60)
            )
        except BaseException as err:  # surfaced below, in the caller's thread
            outcome.append(err)

    worker = threading.Thread(target=test, name="noderun-sbatch-test-only", daemon=True)
    worker.start()
    if meanwhile is not None:
        meanwhile()
    worker.join()
    result = outcome[0]
    if isinstance(result, BaseException):
        raise result
    said = _first_line(result.stderr or result.stdout).removeprefix("sbatch: error: ")
    if result.returncode != 0:
        raise UsageError(
            f"sbatch --test-only refused the job: {said}; nothing was submitted",
            "fix the option it names (`noderun submit --dry-run` shows the script)",
        )
    return said


def job_record(job_id: str) -> JobRecord | None:
    """scontrol's record (kept MinJobAge seconds after the end), else sacct's, else None."""
    if shutil.which("scontrol"):
        try:
            result = _run(["scontrol", "show", "job", "-o", job_id])
        except (OSError, subprocess.TimeoutExpired):
            result = None
        if result is not None and result.returncode == 0 and result.stdout.strip():
            return JobRecord(job_id, parse_scontrol_job(result.stdout), "scontrol")
    if shutil.which("sacct") is None:
        return None
    try:
        result = _run(["sacct", "-X", "-n", "-P", "-j", job_id, "-o", JOB_FIELDS])
    except (OSError, subprocess.TimeoutExpired):
        return None
    fields = parse_sacct_job(result.stdout) if result.returncode == 0 else {}
    fields.update(_sacct_output_files(fields))
    return JobRecord(job_id, fields, "sacct") if fields.get("State") else None


def _sacct_output_files(fields: dict[str, str]) -> dict[str, str]:
    """StdOut/StdErr from the submit line and its script's ``#SBATCH`` lines (sacct has
    neither): ``noderun verify/explain JOBID`` of a plain job finds its log files."""
    submit = fields.get("SubmitLine", "")
    script = submit_script(submit)
    text = ""
    if script:
        path = Path(script) if script.startswith("/") else Path(fields.get("WorkDir", ".")) / script
        with contextlib.suppress(OSError, UnicodeDecodeError):
            text = path.read_text()[:65536]
    return submit_output_files(submit, text) if submit else {}


def job_alive(job_id: str) -> bool:
    """True while SLURM still runs (or queues) ``job_id``."""
    state = job_state(job_id)
    return state is not None and not state.final


def job_state(job_id: str) -> JobState | None:
    """The job's state now (scontrol, else sacct), or None when neither knows it."""
    record = job_record(job_id)
    return record.state if record else None


def job_requeueable(job_id: str) -> bool:
    """True when the job was submitted with ``--requeue`` (False when SLURM cannot say)."""
    record = job_record(job_id)
    return record is not None and record.requeueable


def requeue(job_id: str) -> str:
    """``scontrol requeue JOB``: '' when done, else scontrol's one-line reason."""
    try:
        done = _run(["scontrol", "requeue", job_id])
    except (OSError, subprocess.TimeoutExpired) as err:
        return str(err)
    return "" if done.returncode == 0 else _first_line(done.stderr) or str(done.returncode)


def hostnames(nodelist: str) -> list[str]:
    """Expand a SLURM node list: ``scontrol show hostnames`` when present, else our parser."""
    if shutil.which("scontrol") and nodelist:
        try:
            done = _run(["scontrol", "show", "hostnames", nodelist], timeout=10)
        except (OSError, subprocess.SubprocessError):
            done = None
        if done is not None and done.returncode == 0 and done.stdout.split():
            return done.stdout.split()
    return expand_hostlist(nodelist)


RUNNING_POLL = 1.0  # seconds between scontrol polls of a running job whose end is announced


def wait_for_job(
    job_id: str,
    poll: float = 0.1,
    on_change: Callable[[JobState], None] | None = None,
    on_poll: Callable[[], None] | None = None,
    ending: Callable[[], bool] | None = None,
    max_poll: float = 2.0,
) -> JobState:
    """Poll until the job reaches a final state; report each state change.

    The interval starts at ``poll`` and grows by 10% per poll up to ``max_poll`` (a short
    job is seen to end at once, a long one costs slurmctld little); once ``ending()`` says
    the job is about to end (its launcher wrote the final run.json), it is ``poll / 2``.
    ``ending()`` (a local file check, no slurmctld call) is asked every ``poll / 2`` while
    waiting, so the end is seen within ``poll`` however long the interval has grown; with it,
    a running job is polled every ``RUNNING_POLL`` s or more (scontrol is only needed for an
    end the launcher cannot announce: scancel, a time limit, a lost node), which keeps ~10
    scontrol processes a second out of the first seconds of a short job's ranks' CPU."""
    last: str | None = None
    missing_since: float | None = None
    interval = poll
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
        soon = ending is not None and ending()
        interval = poll / 2 if soon else min(interval * 1.1, max_poll)
        if ending is not None and not soon and last == "RUNNING":
            interval = max(interval, min(RUNNING_POLL, max_poll))
        _nap(interval, None if soon else ending, poll / 2)


def _nap(seconds: float, wake: Callable[[], bool] | None, step: float) -> None:
    """Sleep ``seconds``, or less once ``wake()`` (asked every ``step``) says so."""
    if wake is None:
        time.sleep(seconds)
        return
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        time.sleep(min(step, left))
        if wake():
            return


SacctAnswer = tuple[list[list[str]] | None, str]  # sacct's rows, or None and its error


def _sacct_rows(job_id: str) -> SacctAnswer:
    result = _run(["sacct", "-P", "-j", job_id, f"--format={SACCT_FIELDS}"])
    if result.returncode != 0:
        return None, _first_line(result.stderr or result.stdout)
    return parse_sacct_rows(result.stdout), ""


SACCT_STAGGER = 0.03  # seconds between overlapping sacct asks while records are arriving
SACCT_IN_FLIGHT = 3


def _sacct_settled_rows(
    job_id: str, job_final: bool, steps_run: bool, timeout: float
) -> SacctAnswer:
    """sacct's rows once settled (or its error, or the last rows at ``timeout``).

    Records reach slurmdbd 0.06-0.08 s after scontrol reports the job's end (measured on the
    lab) and one ``sacct`` takes ~0.09 s of waiting on slurmdbd, no CPU: asked one after the
    other, the first ask always missed and the answer came ~0.23 s after the end. So asks
    overlap: a new one every ``SACCT_STAGGER`` s (growing) with up to ``SACCT_IN_FLIGHT`` in
    flight, and the first settled answer wins (~0.09-0.1 s after the end is seen). Daemon
    threads: an ask still running when this returns ends by itself, nobody waits for it."""
    answers: queue.Queue[SacctAnswer] = queue.Queue()

    def ask() -> None:
        try:
            answers.put(_sacct_rows(job_id))
        except Exception as err:  # the waiting loop counts on one answer per ask
            answers.put((None, f"sacct: {err}"))

    deadline = time.monotonic() + timeout
    gap, next_ask, in_flight = SACCT_STAGGER, time.monotonic(), 0
    latest: SacctAnswer = (None, "sacct gave no answer")
    while in_flight or time.monotonic() < deadline:
        now = time.monotonic()
        can_ask = now < deadline and in_flight < SACCT_IN_FLIGHT
        if can_ask and now >= next_ask:
            threading.Thread(target=ask, name="sacct", daemon=True).start()
            in_flight += 1
            next_ask, gap = now + gap, min(gap * 1.5, 0.5)
            can_ask = in_flight < SACCT_IN_FLIGHT
        try:  # the next answer, or the time of the next ask; blocks while none may be asked
            rows, error = answers.get(timeout=next_ask - now if can_ask else None)
        except queue.Empty:
            continue
        in_flight -= 1
        if rows is None or sacct_settled(rows, job_final, steps_run):
            return rows, error
        latest = (rows, error)
    return latest


def sacct_summary(
    job_id: str, job_final: bool, timeout: float = 15.0, steps_run: bool = True
) -> str:
    """A fixed-width table of the job's and steps' states, or a note that sacct is missing."""
    if shutil.which("sacct") is None:
        return f"accounting not available for job {job_id}: `sacct` is not installed here\n"
    rows, error = _sacct_settled_rows(job_id, job_final, steps_run, timeout)
    if rows is None:
        state = job_state(job_id)
        seen = f"scontrol says {state.state}, exit code {state.exit_code}" if state else ""
        return f"accounting not available for job {job_id}: {error}\n{seen}\n".rstrip() + "\n"
    settled = sacct_settled(rows, job_final, steps_run)
    notes = [] if settled else ["some records were still arriving"]
    late = job_row_nodes_late(rows)
    if late:
        notes.append(f"slurmdbd had not recorded all the job's nodes yet: it ran on {late}")
    note = f" ({'; '.join(notes)})" if notes else ""
    return f"sacct for job {job_id}{note}\n" + "\n".join(format_table(rows)) + "\n"


def write_sacct_summary(
    run_dir: Path, job_id: str, job_final: bool, steps_run: bool = True
) -> Path:
    path = run_dir / SACCT_SUMMARY
    atomic.write_text(path, sacct_summary(job_id, job_final, steps_run=steps_run), durable=False)
    return path


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
    lines = parse_labelled(done.stdout)
    error = "" if done.returncode == 0 else _first_line(done.stderr or done.stdout)
    return lines, error


def scancel(job_id: str, signal_name: str | None = None) -> str:
    """``scancel [--signal=NAME] JOB`` (with a signal: to every step's tasks, the batch shell
    left alone): '' when done, else scancel's one-line reason."""
    argv = [require_command("scancel"), *([f"--signal={signal_name}"] if signal_name else [])]
    try:
        done = _run([*argv, job_id])
    except (OSError, subprocess.TimeoutExpired) as err:
        return str(err)
    return "" if done.returncode == 0 else _first_line(done.stderr) or str(done.returncode)
