"""Find the launch mistakes of a hand-written sbatch script before it is submitted. Pure.

Each rule is one of the failures the seeds lost hours to: a bare ``python`` where
``--ntasks-per-node`` asks for several tasks (one process joins, the rest never exist), one
``torchrun`` for a multi-node job, ``$SLURM_NODEID`` expanded by the batch shell instead of
on each node, a fixed ``MASTER_PORT`` that two jobs on one node both take, GPUs per node that
differ from tasks per node in srun mode, and ``CUDA_VISIBLE_DEVICES`` set to a global rank.
"""

from __future__ import annotations

import dataclasses
import enum
import re
import shlex
from collections.abc import Iterator

from noderun.check.noderun_step import noderun_under_srun

_PER_TASK_VARS = ("SLURM_NODEID", "SLURM_PROCID", "SLURM_LOCALID")
_GLOBAL_RANK_VARS = ("SLURM_PROCID", "RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK")
_TORCHRUN = ("torchrun", "torch.distributed.run", "torch.distributed.launch")
# launchers that start srun (or their workers) themselves: never "missing srun"
_SELF_LAUNCHING = ("noderun", "mpirun", "mpiexec", "deepspeed")
_PYTHON = re.compile(r"^(?:.*/)?python(?:3(?:\.\d+)?)?$")
_ASSIGN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_WRAPPERS = ("exec", "time", "env", "nohup", "stdbuf", "numactl", "taskset")
# srun options that take no value (every other option is followed by one unless it has "=")
_SRUN_FLAGS = frozenset(
    {"-l", "--label", "-u", "--unbuffered", "-K", "--kill-on-bad-exit", "--overlap", "--exclusive"}
    | {"--exact", "--pty", "-v", "--verbose", "-Q", "--quiet", "-X", "--disable-status"}
    | {"--overcommit", "-O", "--spread-job"}
)
_FIXED_PORT = re.compile(
    r"(?:^|[\s;])(?:export\s+)?MASTER_PORT=['\"]?(\d+)['\"]?(?=\s|;|$)"
    r"|--master[-_]port[= ]['\"]?(\d+)"
    r"|--rdzv[-_]endpoint[= ]['\"]?[^\s:'\"]+:(\d+)"
)
_CUDA_VISIBLE = re.compile(r"CUDA_VISIBLE_DEVICES=(\S+)")


class Severity(enum.Enum):
    ERROR = "error"
    WARNING = "warning"


@dataclasses.dataclass(frozen=True)
class Finding:
    """One mistake: where (1-based line), what is wrong, and the fix."""

    line: int
    severity: Severity
    code: str
    problem: str
    fix: str

    def render(self, filename: str) -> str:
        tag = "" if self.severity is Severity.ERROR else "warning: "
        return f"{filename}:{self.line}: {tag}{self.problem}; fix: {self.fix}"


@dataclasses.dataclass(frozen=True)
class _Line:
    number: int  # first physical line of a logical line (continuations joined)
    text: str


@dataclasses.dataclass
class _Resources:
    nodes: int | None = None
    ntasks: int | None = None
    ntasks_per_node: int | None = None
    gpus_per_node: int | None = None
    directive_line: dict[str, int] = dataclasses.field(default_factory=dict)

    @property
    def tasks_per_node(self) -> int | None:
        if self.ntasks_per_node is not None:
            return self.ntasks_per_node
        if self.ntasks is not None and self.nodes:
            return max(1, self.ntasks // self.nodes)
        return self.ntasks if self.nodes in (None, 1) else None

    @property
    def many_tasks(self) -> bool:
        return (self.ntasks or 1) > 1 or (self.ntasks_per_node or 1) > 1


def lint_sbatch(text: str) -> list[Finding]:
    """Every launch mistake in ``text`` (an sbatch script), in line order."""
    lines = list(_logical_lines(text))
    resources, late = _directives(lines)
    findings = list(late)
    for line in lines:
        if line.text.lstrip().startswith("#"):
            continue
        findings.extend(_check_command(line, resources))
    return sorted(findings, key=lambda f: (f.line, f.code))


def _logical_lines(text: str) -> Iterator[_Line]:
    """Physical lines joined at trailing backslashes, numbered by their first line."""
    start, parts = 0, list[str]()
    for number, raw in enumerate(text.splitlines(), start=1):
        if not parts:
            start = number
        if raw.endswith("\\") and not raw.endswith("\\\\"):
            parts.append(raw[:-1])
            continue
        parts.append(raw)
        yield _Line(start, " ".join(parts))
        parts = []
    if parts:
        yield _Line(start, " ".join(parts))


def _directives(lines: list[_Line]) -> tuple[_Resources, list[Finding]]:
    """#SBATCH options up to the first command (sbatch stops reading them there)."""
    resources, late, commands_seen = _Resources(), [], False
    for line in lines:
        stripped = line.text.strip()
        if stripped.startswith("#SBATCH"):
            if commands_seen:
                late.append(
                    Finding(
                        line.number,
                        Severity.WARNING,
                        "late-directive",
                        "#SBATCH after the first command is ignored by sbatch",
                        "move every #SBATCH line above the first command",
                    )
                )
                continue
            _read_directive(stripped[len("#SBATCH") :], line.number, resources)
        elif stripped and not stripped.startswith("#"):
            commands_seen = True
    return resources, late


def _read_directive(text: str, number: int, res: _Resources) -> None:
    try:
        words = shlex.split(text, comments=True)
    except ValueError:
        return
    for name, value in _options(words):
        if name in ("--nodes", "-N"):
            res.nodes = _first_int(value)
        elif name in ("--ntasks", "-n"):
            res.ntasks = _first_int(value)
        elif name == "--ntasks-per-node":
            res.ntasks_per_node = _first_int(value)
        elif name == "--gpus-per-node":
            res.gpus_per_node = _first_int(value.rsplit(":", 1)[-1])
        elif name == "--gres" and value.startswith("gpu"):
            res.gpus_per_node = _first_int(value.rsplit(":", 1)[-1]) if ":" in value else 1
        else:
            continue
        res.directive_line[name.lstrip("-")] = number


def _options(words: list[str]) -> Iterator[tuple[str, str]]:
    """(name, value) of ``--name=value``, ``--name value`` and ``-N value`` words."""
    it = iter(words)
    for word in it:
        if word.startswith("--") and "=" in word:
            name, value = word.split("=", 1)
            yield name, value
        elif word.startswith("-"):
            short = word[:2]
            if len(word) > 2 and not word.startswith("--"):
                yield short, word[2:]
            else:
                yield word, next(it, "")


def _first_int(value: str) -> int | None:
    match = re.match(r"\s*(\d+)", value)
    return int(match.group(1)) if match else None


def _check_command(line: _Line, res: _Resources) -> Iterator[Finding]:
    for segment in _segments(line.text):
        words = _words(segment)
        if not words:
            continue
        under_srun, program = _program(words)
        yield from _check_launch(line.number, words, under_srun, program, res)
        if under_srun:
            yield from _check_expansion(line.number, segment)
    yield from _check_port(line)
    yield from _check_cuda_visible(line)


def _segments(text: str) -> list[str]:
    """A command line split at unquoted ``;``, ``&&``, ``||``, ``|`` and ``&``."""
    out, current, quote, i = [], [], "", 0
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == quote:
                quote = ""
            elif ch == "\\" and quote == '"' and i + 1 < len(text):
                current.append(ch)
                i += 1
                ch = text[i]
        elif ch in "'\"":
            quote = ch
        elif ch == "\\" and i + 1 < len(text):
            current.append(ch)
            i += 1
            ch = text[i]
        elif ch == "#" and (not current or current[-1].isspace()):
            break
        elif ch in ";&|":
            out.append("".join(current))
            current = []
            while i + 1 < len(text) and text[i + 1] in "&|":
                i += 1
            i += 1
            continue
        current.append(ch)
        i += 1
    out.append("".join(current))
    return [s.strip() for s in out if s.strip()]


def _words(segment: str) -> list[str]:
    try:
        return shlex.split(segment)
    except ValueError:
        return segment.split()


def _program(words: list[str]) -> tuple[bool, list[str]]:
    """Whether the command runs under srun, and the command srun (or the shell) runs."""
    i = 0
    while i < len(words) and (_ASSIGN.match(words[i]) or words[i] in _WRAPPERS):
        i += 1
    if i < len(words) and words[i] == "srun":
        i += 1
        while i < len(words) and words[i].startswith("-"):
            word = words[i]
            takes_value = (
                "=" not in word
                and word not in _SRUN_FLAGS
                and not (not word.startswith("--") and len(word) > 2)
            )
            i += 2 if takes_value else 1
        return True, words[i:]
    return False, words[i:]


def _kind(program: list[str]) -> str:
    """'torchrun', 'python', 'launcher' or '' for the command's program."""
    if not program:
        return ""
    name = program[0].rsplit("/", 1)[-1]
    if name == "torchrun":
        return "torchrun"
    if name in _SELF_LAUNCHING:
        return "launcher"
    if _PYTHON.match(name):
        rest = program[1:]
        if "-m" in rest and rest.index("-m") + 1 < len(rest):
            module = rest[rest.index("-m") + 1]
            if module in _TORCHRUN:
                return "torchrun"
            return "launcher" if module in _SELF_LAUNCHING else "python"
        if any(w.endswith(".py") for w in rest):
            return "python"
    if name in ("bash", "sh") and "-c" in program:
        inner = program[program.index("-c") + 1 :]
        return _kind(_words(inner[0])) if inner else ""
    return ""


def _check_launch(
    number: int, words: list[str], under_srun: bool, program: list[str], res: _Resources
) -> Iterator[Finding]:
    kind = _kind(program)
    command = " ".join(program[:4]) + (" …" if len(program) > 4 else "")
    if kind == "python" and not under_srun and res.many_tasks:
        tasks = res.ntasks or (res.ntasks_per_node or 1) * (res.nodes or 1)
        yield Finding(
            number,
            Severity.ERROR,
            "missing-srun",
            f"`{command}` is not under srun, but the job asks for {tasks} tasks: one process "
            f"starts, waits for {tasks - 1} that never exist, and the job hangs until its timeout",
            f"srun {' '.join(program)}",
        )
    if kind == "torchrun" and not under_srun and (res.nodes or 1) > 1:
        yield Finding(
            number,
            Severity.ERROR,
            "torchrun-once",
            f"torchrun runs once for the whole job, on the first of {res.nodes} nodes; the other "
            "nodes never start their workers",
            "start one torchrun per node: srun --ntasks-per-node=1 bash -c 'torchrun "
            "--node_rank=$SLURM_NODEID …' (single quotes), or `noderun submit`",
        )
    if under_srun:  # `srun noderun run`: right with one agent per node (check/noderun_step.py)
        for code, problem, fix in noderun_under_srun(words, program, res.tasks_per_node):
            yield Finding(number, Severity.ERROR, code, problem, fix)
    if under_srun and kind == "python" and res.gpus_per_node is not None:
        per_node = res.tasks_per_node
        if per_node is not None and per_node != res.gpus_per_node:
            yield Finding(
                number,
                Severity.ERROR,
                "gpus-vs-tasks",
                f"srun starts {per_node} task(s) per node but the job has {res.gpus_per_node} "
                "GPU(s) per node: one rank per GPU needs as many tasks as GPUs",
                f"#SBATCH --ntasks-per-node={res.gpus_per_node} (or --gpus-per-node={per_node})",
            )


def _check_expansion(number: int, segment: str) -> Iterator[Finding]:
    """``$SLURM_NODEID`` in an srun line expanded by the batch shell (once, on node 0)."""
    for name in _batch_expanded(segment):
        yield Finding(
            number,
            Severity.ERROR,
            "expands-in-batch-shell",
            f"${name} is expanded by the batch shell on the first node before srun runs, so "
            f"every task gets that node's value (all nodes become node 0)",
            f"escape it (\\${name}) or single-quote the bash -c string, so each task expands it",
        )


def _batch_expanded(segment: str) -> list[str]:
    """Per-task variables the batch shell expands: unquoted or in double quotes, unescaped."""
    found, quote, i = [], "", 0
    while i < len(segment):
        ch = segment[i]
        if quote == "'":
            quote = "" if ch == "'" else quote
        elif ch == "\\":
            i += 2
            continue
        elif ch in "'\"":
            quote = "" if quote == ch else (quote or ch)
        elif ch == "$":
            match = re.match(r"\$\{?(" + "|".join(_PER_TASK_VARS) + r")\b", segment[i:])
            if match:
                found.append(match.group(1))
        i += 1
    return found


def _check_port(line: _Line) -> Iterator[Finding]:
    match = _FIXED_PORT.search(line.text)
    if match:
        port = next(g for g in match.groups() if g)
        yield Finding(
            line.number,
            Severity.WARNING,
            "fixed-port",
            f"fixed port {port}: two jobs that share a node both take it, and the second fails "
            "with 'Address already in use'",
            "derive it from the job id: export MASTER_PORT=$((20000 + SLURM_JOB_ID % 20000))",
        )


def _check_cuda_visible(line: _Line) -> Iterator[Finding]:
    match = _CUDA_VISIBLE.search(line.text)
    if not match:
        return
    value = match.group(1)
    for name in _GLOBAL_RANK_VARS:
        if re.search(r"\$\{?" + name + r"\b", value) or re.search(r"\(\(\s*" + name, value):
            yield Finding(
                line.number,
                Severity.ERROR,
                "global-rank-device",
                f"CUDA_VISIBLE_DEVICES is set from the global rank (${name}): on every node but "
                "the first it names a GPU that does not exist (invalid device ordinal)",
                "do not set it by hand; let SLURM bind GPUs (--gpus-per-task) or use the local "
                "rank ($SLURM_LOCALID / LOCAL_RANK) as the device index",
            )
            return
