"""Parsers of what SLURM's commands print (scontrol, sacct, sinfo). Pure: text in, values out.

``backends/slurm.py`` runs the commands; everything that reads their output lives here, so
one parser per output format, tested with output captured on the lab (``tests/backends``).
"""

from __future__ import annotations

import dataclasses
import re

from noderun.errors import TopologyError
from noderun.topology.hostlist import compress_hostlist, expand_hostlist

# a job id as users pass it: 4711, or an array task's <array job>_<task> (4711_2)
JOB_ID = re.compile(r"^\d+(_\d+)?$")

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
SACCT_FIELDS = "JobID,JobName,State,ExitCode,Elapsed,NNodes,NodeList"
# what ``sacct -X -n -P -o JOB_FIELDS`` gives for a job scontrol has forgotten
JOB_FIELDS = "JobID,State,ExitCode,WorkDir,SubmitLine,NodeList"
_KEY_VALUE = re.compile(r"(\S+?)=(.*?)(?= \S+?=|\s*$)")
_LABELLED = re.compile(r"^\s*(\d+): ?(.*)$")  # srun --label


def state_status(state: str) -> str:
    """``CANCELLED by 0`` -> ``cancelled``; an unknown word -> ``unknown``."""
    words = state.split()
    return JOB_STATES.get(words[0].rstrip("+"), "unknown") if words else "unknown"


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
        return state_status(self.state)

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


@dataclasses.dataclass(frozen=True)
class JobRecord:
    """What one job's record says, from ``scontrol show job -o`` or else sacct."""

    job_id: str
    fields: dict[str, str]
    source: str  # "scontrol" or "sacct"

    @property
    def state(self) -> JobState:
        code, sig = parse_exit_code(self.fields.get("ExitCode", ""))
        return JobState(
            job_id=self.job_id,
            state=self.fields.get("JobState") or self.fields.get("State") or "UNKNOWN",
            exit_code=code,
            signal=sig,
            nodes=self.fields.get("NodeList", ""),
            reason=self.fields.get("Reason", ""),
            stdout=self.output_files()[0]
            if self.source == "scontrol" and self.output_files()
            else "",
        )

    @property
    def requeueable(self) -> bool:
        """``sbatch --requeue`` (scontrol's ``Requeue=1``)."""
        return self.fields.get("Requeue") == "1"

    @property
    def array_task(self) -> str | None:
        """``<array job>_<task>`` when this is one task of a job array (scontrol's
        ArrayJobId/ArrayTaskId, sacct's JobID), else None."""
        array, task = self.fields.get("ArrayJobId", ""), self.fields.get("ArrayTaskId", "")
        if array.isdigit() and task.isdigit():
            return f"{array}_{task}"
        job = self.fields.get("JobID", "")
        return job if re.fullmatch(r"\d+_\d+", job) else None

    @property
    def workdir(self) -> str:
        return self.fields.get("WorkDir", "")

    def output_files(self) -> list[str]:
        """StdOut/StdErr with ``%j`` filled in; sacct (22.05) has none: ``slurm-ID.out``."""
        base = self.job_id.split("_")[0]
        if self.source == "sacct" and not self.fields.get("StdOut"):
            return [f"{self.workdir.rstrip('/')}/slurm-{base}.out"] if self.workdir else []
        out = []
        for key in ("StdOut", "StdErr"):
            value = self.fields.get(key, "").replace("%j", base)
            if value and not value.startswith("/") and self.workdir:
                value = f"{self.workdir.rstrip('/')}/{value}"
            if value and value not in out:
                out.append(value)
        return out

    def paths(self) -> list[str]:
        """Absolute paths the job names: its batch script, output files and working directory."""
        if self.source == "sacct":
            submit = self.fields.get("SubmitLine", "").split()[1:]
            found = [*submit, self.workdir]
        else:
            found = [self.fields.get("Command", ""), *self.output_files(), self.workdir]
        return [p for p in found if p.startswith("/")]


def parse_scontrol_job(text: str) -> dict[str, str]:
    """``JobId=1 JobState=COMPLETED ExitCode=0:0 …`` (scontrol -o, one line) -> dict.

    Values may hold spaces (``Command=/a b/job.sbatch``): a value runs to the next `` Key=``.
    """
    line = next((ln for ln in text.splitlines() if ln.strip()), "")
    return {m.group(1): m.group(2) for m in _KEY_VALUE.finditer(line.strip())}


def parse_sacct_job(text: str, fields: str = JOB_FIELDS) -> dict[str, str]:
    """The first line of ``sacct -X -n -P -o FIELDS`` as a dict; {} when there is none.

    SubmitLine may contain ``|`` itself, so the last field(s) are split from the right.
    """
    line = next((ln for ln in text.splitlines() if ln.strip()), "")
    if not line:
        return {}
    names = fields.split(",")
    if "SubmitLine" in names:
        at = names.index("SubmitLine")
        head = line.split("|", at)
        tail = head[-1].rsplit("|", len(names) - at - 1) if len(head) > at else []
        values = head[:at] + tail
    else:
        values = line.split("|")
    return dict(zip(names, values, strict=False))


_OUTPUT_OPTIONS = {"-o": "StdOut", "--output": "StdOut", "-e": "StdErr", "--error": "StdErr"}
_DIRECTIVE = re.compile(r"^#SBATCH\s+(.*)$")


def submit_output_files(submit_line: str, script_text: str = "") -> dict[str, str]:
    """StdOut/StdErr as sbatch was told them (sacct 22.05 records neither): the submit line's
    options win over the script's ``#SBATCH`` lines; ``%j`` left for ``output_files``.

    >>> submit_output_files("sbatch -o logs/%j.out job.sh", "#SBATCH --error=e.txt")
    {'StdErr': 'e.txt', 'StdOut': 'logs/%j.out'}
    """
    found: dict[str, str] = {}
    lines = [m.group(1) for ln in script_text.splitlines() if (m := _DIRECTIVE.match(ln))]
    for words in [w.split() for w in lines] + [submit_line.split()[1:]]:
        for i, word in enumerate(words):
            name, eq, value = word.partition("=")
            key = _OUTPUT_OPTIONS.get(name)
            if key and not eq:
                value = words[i + 1] if i + 1 < len(words) else ""
            if key and value:
                found[key] = value
    return found


def submit_script(submit_line: str) -> str:
    """The batch script a submit line names (its first word ending the options), or ''."""
    words = submit_line.split()[1:]
    i = 0
    while i < len(words) and words[i].startswith("-"):
        i += 1 if "=" in words[i] or words[i] in ("--parsable", "--wait", "-W", "-H") else 2
    return words[i] if i < len(words) else ""


def parse_exit_code(text: str) -> tuple[int | None, int | None]:
    """SLURM's ``code:signal`` -> (code, signal); missing parts -> None."""
    code, _, sig = text.partition(":")
    return (int(code) if code.isdigit() else None, int(sig) if sig.isdigit() else None)


def parse_sacct_rows(text: str) -> list[list[str]]:
    """``sacct -P`` output (header first) as rows of fields."""
    return [line.split("|") for line in text.splitlines() if line.strip()]


def is_step(job_id: str) -> bool:
    """A numbered srun step (``7.0``), not the job (``7``) nor ``7.batch``/``7.extern``."""
    return "." in job_id and job_id.split(".")[1][:1].isdigit()


def sacct_settled(rows: list[list[str]], job_final: bool, steps_run: bool = True) -> bool:
    """True once the records we care about are final: the steps, and the job when it ended.
    ``steps_run`` False: the launcher ran no srun step (one node, torchrun on the batch
    host), so there is no step record to wait for while the job runs.

    The job row's NodeList is not waited for: slurmdbd may hold it with only the batch host
    for seconds after the job ended (0.8-4.8 s on the lab, cf. reframe-hpc/reframe#2567);
    :func:`job_row_nodes_late` says so and readers take the steps' nodes too."""
    body = rows[1:]
    if not body:
        return False
    if not job_final and not steps_run:
        return True
    wanted = body if job_final else [r for r in body if is_step(r[0])]
    return bool(wanted) and all(state_status(r[2]) in FINAL for r in wanted)


def nodes_with_steps(job_nodes: str, step_nodes: list[str]) -> tuple[str, bool]:
    """The job's nodes as its row's NodeList joined with its steps' (compressed), and whether
    the row lacked some of them (slurmdbd's late job record). Raises TopologyError."""
    listed = set(expand_hostlist(job_nodes))
    stepped = {
        host
        for text in step_nodes
        if text not in ("", "None assigned")
        for host in expand_hostlist(text)
    }
    return compress_hostlist(sorted(listed | stepped)), not stepped <= listed


def job_row_nodes_late(rows: list[list[str]]) -> str | None:
    """The nodes the steps ran on when the job row does not list them all yet, else None."""
    header, body = rows[0], rows[1:]
    if "NodeList" not in header:
        return None
    at = header.index("NodeList")
    job = [r for r in body if "." not in r[0] and len(r) > at]
    if not job:
        return None
    try:
        nodes, late = nodes_with_steps(job[0][at], [r[at] for r in body if is_step(r[0])])
    except TopologyError:
        return None  # a node list we cannot read: nothing to say about it
    return nodes if late else None


def format_table(rows: list[list[str]]) -> list[str]:
    """Rows as fixed-width lines (columns two spaces apart), as ``sacct_summary.txt`` holds."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows
    ]


def parse_table(lines: list[str]) -> list[dict[str, str]]:
    """Fixed-width lines (header first) back to dicts, by column position: a value may hold
    a space (``CANCELLED by 0``)."""
    if not lines:
        return []
    header = lines[0]
    starts = [m.start() for m in re.finditer(r"\S+", header)]
    names = header.split()
    rows = []
    for line in lines[1:]:
        if not line.strip():
            continue
        cells = [
            line[start : starts[i + 1] if i + 1 < len(starts) else None].strip()
            for i, start in enumerate(starts)
        ]
        rows.append(dict(zip(names, cells, strict=True)))
    return rows


def parse_sinfo_nodes(text: str) -> list[tuple[str, str, int, int]]:
    """``sinfo -h -N -o %N|%P|%c|%G`` -> (node, partition with ``*`` if default, cpus, gpus)."""
    out = []
    for line in text.splitlines():
        fields = line.strip().split("|")
        if len(fields) != 4:
            continue
        node, partition, cpu_text, gres = fields
        digits = re.match(r"\d+", cpu_text)
        out.append((node, partition, int(digits.group()) if digits else 0, gpus_of_gres(gres)))
    return out


def gpus_of_gres(gres: str) -> int:
    """``gpu:a100:4(S:0-1),shard:2`` -> 4; ``(null)`` -> 0."""
    total = 0
    for item in gres.split(","):
        parts = item.split("(")[0].split(":")
        if parts[0] == "gpu" and parts[-1].isdigit():
            total = max(total, int(parts[-1]))
    return total


def parse_labelled(text: str) -> list[tuple[int, str]]:
    """``srun --label`` output -> (task, line) for every labelled line."""
    return [
        (int(match.group(1)), match.group(2))
        for line in text.splitlines()
        if (match := _LABELLED.match(line))
    ]
