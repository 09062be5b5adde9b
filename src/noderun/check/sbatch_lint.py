"""Find the launch mistakes of a hand-written sbatch script before it is submitted.

The script is read as bash reads it (``noderun.check.shell``): continuations, commands kept in
variables, heredocs, functions, ``bash -c`` strings run by srun on each task. Each rule is one of
the failures users lost hours to:

- ``missing-srun``: a one-rank-per-process program started without srun where the job asks for
  several tasks (one process starts and waits for the others);
- ``torchrun-once``: a launcher that starts workers on its own node only (torchrun,
  ``torch.distributed.launch``, accelerate launch) run once by the batch shell of a multi-node job;
- ``launcher-per-task``: such a launcher started by srun once per task instead of once per node;
- ``expands-in-batch-shell``: ``$SLURM_PROCID``/``$SLURM_NODEID`` replaced by the batch shell's
  value before srun runs (every node gets node 0's value);
- ``same-node-rank``: one literal ``--node_rank`` given to the launcher on every node, or none at
  all with a static rendezvous address (every node defaults to rank 0);
- ``unexported-variable``: a per-task shell (``bash -c '…'``, a quoted heredoc) reads a variable
  the batch script set without ``export``;
- ``gpus-vs-tasks``: GPUs per node against tasks per node for one-process-per-GPU programs, in
  every spelling (``--gres=gpu:N``, ``--gpus-per-node``, ``--gpus-per-task``, ``--gpus``);
- ``global-rank-device``: ``CUDA_VISIBLE_DEVICES`` set from the global rank;
- ``output-dir-missing``: an ``#SBATCH --output/--error`` folder that does not exist when sbatch
  opens the file (the script creates it too late, or never);
- ``script-not-found``: a training script path that does not exist (only with file checks);
- ``fixed-port`` (warning) and ``late-directive`` (``#SBATCH`` after the first command).

Unsure means a warning, never an error. A script that is not bash gets no findings:
``script_language`` says what it is.
"""

from __future__ import annotations

import dataclasses
import enum
import re
import shlex
from collections.abc import Iterator
from pathlib import Path

from noderun.check.noderun_step import noderun_under_srun
from noderun.check.shell import (
    PER_TASK,
    UNKNOWN,
    Expander,
    Heredoc,
    RawCommand,
    Var,
    Word,
    assignment,
    display,
    mark_line,
    raw_words,
    split_commands,
    strip_keywords,
)

_GLOBAL_RANK_VARS = ("SLURM_PROCID", "RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK")
_PYTHON = re.compile(r"^(?:.*/)?python(?:3(?:\.\d+)?)?$")
# srun options that take no value (any other option without "=" takes the next word)
_SRUN_FLAGS = frozenset(
    {"-l", "--label", "-u", "--unbuffered", "-K", "--kill-on-bad-exit", "--overlap", "--exclusive"}
    | {"--exact", "--pty", "-v", "--verbose", "-Q", "--quiet", "-X", "--disable-status"}
    | {"--overcommit", "-O", "--spread-job", "-k", "--no-kill", "--multi-prog", "-Z"}
    | {"--no-allocate", "-s", "--oversubscribe", "-E", "--preserve-env", "-H", "--hold"}
    | {"--container-remap-root", "--no-container-remap-root", "--container-writable"}
    | {"--container-readonly", "--no-container-mount-home", "--container-mount-home"}
    | {"--no-container-entrypoint", "--container-entrypoint", "--test-only", "--usage", "-h"}
)
_SHORT_WITH_VALUE = frozenset("NnGcwxptJoeAWmCdDiBSrTMLq")
_CONTAINERS = frozenset(
    {"singularity", "apptainer", "singularity_wrapper", "docker", "podman", "enroot", "shifter"}
)
# words that run the rest of the line as a command
_WRAPPERS = frozenset({"exec", "time", "env", "nohup", "stdbuf", "nice", "command", "builtin"})
_FIXED_PORT = re.compile(
    r"(?:^|[\s;])(?:export\s+)?MASTER_PORT=['\"]?(\d+)['\"]?(?=\s|;|$)"
    r"|--master[-_]port[= ]['\"]?(\d+)"
    r"|--rdzv[-_]endpoint[= ]['\"]?[^\s:'\"]+:(\d+)"
)
_CUDA_VISIBLE = re.compile(r"CUDA_VISIBLE_DEVICES=(\S+)")
_LIGHTNING = re.compile(r"lightning|\bPTL\b|\bPL_[A-Z]", re.I)
# signs that the program is one rank of a distributed job (else several tasks may be meant as
# independent copies, or one process may drive several GPUs itself)
_DISTRIBUTED = re.compile(
    r"MASTER_ADDR|MASTER_PORT|WORLD_SIZE|torch\.distributed|torchrun|\bddp\b|nccl|lightning"
    r"|\bPL_[A-Z]|--distributed|deepspeed|accelerate|dist[-_]url|init_method|--launcher|horovod",
    re.I,
)
_DISTRIBUTED_CODE = re.compile(
    r"init_process_group|DistributedDataParallel|lightning|Trainer\(|accelerate|deepspeed"
    r"|horovod|torch\.distributed",
)
_OUTPUT_PATTERN = re.compile(r"%[0-9]*[jJAaNnst]")
_RESOURCE_DIRECTIVES = ("--nodes", "-N", "--ntasks", "-n", "--ntasks-per-node", "--gres")
_RESOURCE_DIRECTIVES_2 = ("--gpus", "-G", "--gpus-per-node", "--gpus-per-task", "--partition", "-p")


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


@dataclasses.dataclass
class _Resources:
    nodes: int | None = None
    ntasks: int | None = None
    ntasks_per_node: int | None = None
    gpus_per_node: int | None = None
    gpus_per_task: int | None = None
    gpus_total: int | None = None
    chdir: str | None = None
    outputs: list[tuple[int, str, str]] = dataclasses.field(default_factory=list)

    @property
    def tasks_per_node(self) -> int | None:
        """Tasks srun starts per node by default in this allocation (None: not known)."""
        per_node = self.ntasks_per_node
        if self.ntasks is not None:
            nodes = self.nodes or 1
            spread = -(-self.ntasks // nodes)
            return min(per_node, spread) if per_node else spread
        if per_node is not None:
            return per_node
        return 1

    @property
    def total_tasks(self) -> int | None:
        if self.ntasks is not None:
            return self.ntasks
        if self.ntasks_per_node is not None:
            return self.ntasks_per_node * (self.nodes or 1)
        return None

    @property
    def many_tasks(self) -> bool:
        return (self.ntasks or 1) > 1 or (self.ntasks_per_node or 1) > 1

    def gpus_on_node(self, tasks_per_node: int | None) -> int | None:
        if self.gpus_per_node is not None:
            return self.gpus_per_node
        if self.gpus_per_task is not None and tasks_per_node is not None:
            return self.gpus_per_task * tasks_per_node
        if self.gpus_total is not None:
            return self.gpus_total // (self.nodes or 1) if self.nodes else self.gpus_total
        return None


@dataclasses.dataclass(frozen=True)
class _Step:
    """How srun starts one command: tasks and GPUs per node, nodes (None: not known)."""

    tasks_per_node: int | None
    gpus_per_node: int | None
    nodes: int | None
    container: bool = False
    # srun --ntasks-per-node against the job's task count without -n: srun ignores it (it takes
    # SLURM_NTASKS from the batch environment); Slurm 22.05 ignores it with -N too (measured on
    # the lab), newer releases honour it with -N. Here: the tasks per node if it is ignored.
    tasks_if_ignored: int | None = None
    ignored_per_node: int | None = None  # srun's own --ntasks-per-node, ignored (see above)


@dataclasses.dataclass(frozen=True)
class _Launch:
    line: int
    words: tuple[Word, ...]  # the program and its arguments, expanded
    step: _Step | None  # None: run by the batch shell itself
    cd_before: bool
    in_container: bool


def script_language(text: str) -> str:
    """'bash' for a shell batch script, else what it is ('python', 'csh', …)."""
    first = text.lstrip("\ufeff").split("\n", 1)[0].strip()
    if first.startswith("#!"):
        interpreter = first[2:].strip().split()
        name = interpreter[0].rsplit("/", 1)[-1] if interpreter else ""
        if name == "env" and len(interpreter) > 1:
            name = next((w for w in interpreter[1:] if not w.startswith("-")), "")
        name = re.sub(r"[0-9.]+$", "", name)
        if name in ("bash", "sh", "zsh", "ksh", "dash", ""):
            return "bash"
        return name
    body = [ln.strip() for ln in text.split("\n") if ln.strip() and not ln.strip().startswith("#")]
    if body and any(
        re.match(r"(import \w|from [\w.]+ import |def \w+\(|if __name__)", ln) for ln in body[:20]
    ):
        return "python"
    if body and any(re.match(r"(setenv \w|set \w+\s*=)", ln) for ln in body[:20]):
        return "csh"
    return "bash"


def lint_sbatch(
    text: str, *, script_path: Path | None = None, submit_dir: Path | None = None
) -> list[Finding]:
    """Every launch mistake in ``text`` (an sbatch script), in line order.

    With ``script_path`` and ``submit_dir`` the files the script names are looked up too
    (relative paths against the submit directory and the script's own directory).
    """
    if script_language(text) != "bash":
        return []
    linter = _Linter(text, script_path, submit_dir)
    return sorted(set(linter.run()), key=lambda f: (f.line, f.code, f.problem))


class _Linter:
    def __init__(self, text: str, script_path: Path | None, submit_dir: Path | None):
        self.text = text
        self.script_dir = script_path.parent if script_path is not None else None
        self.submit_dir = submit_dir
        self.res, self.findings = _directives(text)
        self.lightning = bool(_LIGHTNING.search(text))
        self.distributed = bool(_DISTRIBUTED.search(text))
        self.env: dict[str, Var] = {}
        self.export_all = False
        self.functions: dict[str, list[RawCommand]] = {}
        self.launches: list[_Launch] = []
        self.mkdirs: list[str] = []
        self.cd_seen = False
        self.files: dict[str, str] = {}
        self._seed_env()

    def _seed_env(self) -> None:
        """Job-level variables the directives fix (SLURM_NNODES …), for expansions like -n."""
        known = {
            ("SLURM_NNODES", "SLURM_JOB_NUM_NODES"): self.res.nodes,
            ("SLURM_NTASKS", "SLURM_NPROCS"): self.res.total_tasks,
            ("SLURM_NTASKS_PER_NODE",): self.res.ntasks_per_node,
            ("SLURM_GPUS_ON_NODE", "SLURM_GPUS_PER_NODE"): self.res.gpus_per_node,
        }
        for names, value in known.items():
            for name in names:
                self.env[name] = Var(None if value is None else str(value), exported=True)

    def run(self) -> Iterator[Finding]:
        commands = split_commands(self.text)
        self._walk(commands, positional=())
        yield from self.findings
        yield from _line_checks(self.text)
        yield from self._check_launches()
        yield from self._check_outputs()

    # --- walking the batch shell -------------------------------------------------------
    def _walk(
        self, commands: list[RawCommand], positional: tuple[str, ...], depth: int = 0
    ) -> None:
        i = 0
        while i < len(commands):
            cmd = commands[i]
            i += 1
            name = _function_name(cmd.text)
            if name is not None:
                body, i = _function_body(commands, i, cmd)
                self.functions[name] = body
                continue
            if cmd.text.startswith("#"):
                continue
            self._command(cmd, positional, depth)

    def _command(self, cmd: RawCommand, positional: tuple[str, ...], depth: int) -> None:
        expander = Expander(self.env, batch=True, positional=positional)
        words = strip_keywords(expander.words(cmd.text))
        if not words:
            return
        raws = raw_words(cmd.text)
        while raws and raws[0] in ("then", "do", "else", "{", "!"):
            raws = raws[1:]
        head = words[0].text
        # assignments only: NAME=value …
        if raws and all(assignment(w) for w in raws):
            for raw in raws:
                self._assign(raw, cmd.line, exported=self.export_all)
            return
        if head in ("export", "declare", "typeset", "readonly", "local"):
            exported = head == "export" or any(
                w.text.startswith("-") and "x" in w.text for w in words[1:]
            )
            for raw in raws[1:]:
                if raw.startswith("-"):
                    continue
                if assignment(raw):
                    self._assign(raw, cmd.line, exported=exported or self.export_all)
                elif re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", raw):
                    var = self.env.setdefault(raw, Var(None))
                    var.exported = var.exported or exported
            return
        if head == "set" and any(re.fullmatch(r"-[a-z]*a[a-z]*", w.text) for w in words[1:]):
            self.export_all = True
        if head == "unset":
            for w in words[1:]:
                self.env.pop(w.text, None)
            return
        if head == "cd" or head == "pushd":
            self.cd_seen = True
        if head == "mkdir":
            self.mkdirs.extend(w.text for w in words[1:] if not w.text.startswith("-"))
        if head in self.functions and depth < 5:
            self._walk(self.functions[head], tuple(w.text for w in words[1:]), depth + 1)
            return
        if head in ("source", "."):
            return
        for doc in cmd.heredocs:
            target = _heredoc_target(words)
            if target:
                self.files[target] = self._heredoc_text(doc)
        self._launch(cmd, words, cmd.heredocs)

    def _assign(self, raw: str, line: int, exported: bool) -> None:
        parsed = assignment(raw)
        if parsed is None:
            return
        name, value_text, _ = parsed
        previous = self.env.get(name)
        was_exported = previous.exported if previous else False
        if value_text.startswith("(") and value_text.endswith(")"):
            words = Expander(self.env, batch=True).words(value_text[1:-1])
            self.env[name] = Var(
                " ".join(w.text for w in words),
                exported or was_exported,
                array=tuple(w.text for w in words),
            )
            return
        # assignment does no word splitting: read the raw value as one double-quoted word
        one = Expander(self.env, batch=True).words(f'"{_dequote_for_join(value_text)}"')
        value = mark_line(one[0].text, line) if one else ""
        self.env[name] = Var(value, exported or was_exported)

    def _heredoc_text(self, doc: Heredoc) -> str:
        if doc.quoted:
            return doc.body
        # the batch shell expands an unquoted heredoc body as if double-quoted
        words = Expander(self.env, batch=True).words('"' + doc.body.replace('"', '\\"') + '"')
        return words[0].text if words else ""

    # --- what a command starts -----------------------------------------------------------
    def _launch(self, cmd: RawCommand, words: list[Word], heredocs: tuple[Heredoc, ...]) -> None:
        words = _unwrap(_strip_redirections(words))
        if not words:
            return
        if _base(words[0].text) == "srun":
            options, program = _srun_split(words[1:])
            step = self._step(options)
            program = _unwrap(program)
            container = step.container or _is_container(program)
            program = _strip_container(program)
            self._under_srun(cmd, program, step, heredocs, container)
            return
        container = _is_container(words)
        self.launches.append(
            _Launch(cmd.line, tuple(_strip_container(words)), None, self.cd_seen, container)
        )

    def _under_srun(
        self,
        cmd: RawCommand,
        program: list[Word],
        step: _Step,
        heredocs: tuple[Heredoc, ...],
        container: bool,
    ) -> None:
        """Record what srun runs; a shell it runs is read as the task's own shell."""
        if not program:
            return
        name = _base(program[0].text)
        inner: str | None = None
        if name in ("bash", "sh", "zsh", "dash"):
            flags = [w.text for w in program[1:] if w.text.startswith("-")]
            rest = [w for w in program[1:] if not w.text.startswith("-")]
            if any("c" in f.lstrip("-") for f in flags if not f.startswith("--")) and rest:
                inner = rest[0].text
            elif rest and rest[0].text in self.files:
                inner = self.files[rest[0].text]
            elif not rest and heredocs:
                inner = self._heredoc_text(heredocs[0])
            if inner is not None:
                self._task_shell(cmd.line, inner, step, container)
                return
        elif program[0].text in self.files:
            self._task_shell(cmd.line, self.files[program[0].text], step, container)
            return
        self.launches.append(_Launch(cmd.line, tuple(program), step, self.cd_seen, container))

    def _task_shell(self, line: int, script: str, step: _Step, container: bool) -> None:
        """A shell srun starts on every task: it sees exported variables and its own ranks."""
        env = {n: dataclasses.replace(v) for n, v in self.env.items() if v.exported}
        assigned: set[str] = set()
        for raw in split_commands(script):
            expander = Expander(env, batch=False)
            words = strip_keywords(expander.words(raw.text))
            for name in expander.used - assigned:
                var = self.env.get(name)
                if var is not None and not var.exported and name not in env:
                    self.findings.append(_unexported(line, name))
                    assigned.add(name)
            if not words:
                continue
            raws = raw_words(raw.text)
            if (raws and all(assignment(r) for r in raws)) or words[0].text in ("export", "local"):
                for r in raws:
                    parsed = assignment(r)
                    if parsed:
                        one = Expander(env, batch=False).words(f'"{_dequote_for_join(parsed[1])}"')
                        env[parsed[0]] = Var(one[0].text if one else "", True)
                        assigned.add(parsed[0])
                continue
            if words[0].text == "cd":
                continue
            program = _strip_container(_unwrap(_strip_redirections(words)))
            if not program:
                continue
            self.launches.append(_Launch(line, tuple(program), step, self.cd_seen, container))

    def _step(self, options: list[tuple[str, str]]) -> _Step:
        opts = {name: value for name, value in options}
        res = self.res
        nodes = _int(opts.get("--nodes") or opts.get("-N"))
        if nodes is None and ("-w" in opts or "--nodelist" in opts):
            nodelist = opts.get("-w") or opts.get("--nodelist") or ""
            nodes = (
                1
                if nodelist
                and "," not in nodelist
                and "[" not in nodelist
                and UNKNOWN not in nodelist
                else None
            )
        has_nodes = "--nodes" in opts or "-N" in opts
        ntasks_text = opts.get("--ntasks") or opts.get("-n")
        ntasks = _int(ntasks_text)
        per_node = _int(opts.get("--ntasks-per-node"))
        job_nodes = res.nodes or 1 if res.nodes is not None else None
        step_nodes = nodes if nodes is not None else (job_nodes if not has_nodes else None)
        tasks: int | None
        if_ignored = ignored = None
        if "--ntasks-per-node" in opts:
            total = res.total_tasks
            conflict = (
                ntasks_text is None
                and total is not None
                and per_node is not None
                and total != per_node * (step_nodes or res.nodes or 1)
            )
            tasks = res.tasks_per_node if conflict and not has_nodes else per_node
            if conflict and not has_nodes:
                ignored = per_node
            if conflict and has_nodes:
                if_ignored = res.tasks_per_node
        elif ntasks_text is not None:
            if ntasks is None:
                tasks = None
            else:
                span = step_nodes or 1
                tasks = -(-ntasks // span) if step_nodes else (1 if ntasks == 1 else None)
        else:
            tasks = res.tasks_per_node
        gpus = _gpus_from_options(opts, tasks, step_nodes)
        if gpus is None:
            gpus = res.gpus_on_node(tasks if tasks is not None else res.tasks_per_node)
            if res.gpus_per_task is not None and tasks is not None:
                gpus = res.gpus_per_task * tasks
        container = any(k.startswith("--container-") for k in opts)
        return _Step(tasks, gpus, step_nodes, container, if_ignored, ignored)

    # --- rules ---------------------------------------------------------------------------
    def _check_launches(self) -> Iterator[Finding]:
        res = self.res
        srun_launch = any(
            launch.step is not None and _kind(list(launch.words), True) in ("python", "spawner")
            for launch in self.launches
        ) or any(_kind(list(launch.words), False) == "self" for launch in self.launches)
        for launch in self.launches:
            words = list(launch.words)
            kind = _kind(words, launch.step is not None)
            if launch.step is None:
                if kind == "python" and res.many_tasks and not srun_launch:
                    sure = (res.nodes or 1) > 1 or self._is_distributed(launch)
                    yield _missing_srun(launch, res, sure)
                if kind == "spawner" and (res.nodes or 1) > 1:
                    yield _launcher_once(launch, res)
            else:
                yield from self._check_step(launch, kind)
            if kind in ("python", "spawner"):
                yield from self._check_script_path(launch, kind)

    def _check_step(self, launch: _Launch, kind: str) -> Iterator[Finding]:
        words = list(launch.words)
        step = launch.step
        assert step is not None
        if kind == "spawner" and step.tasks_per_node is not None and step.tasks_per_node > 1:
            yield _launcher_per_task(launch, step.tasks_per_node, True, step.ignored_per_node)
        elif kind == "spawner" and step.tasks_if_ignored is not None and step.tasks_if_ignored > 1:
            yield _launcher_per_task(launch, step.tasks_if_ignored, False)
        batch_vars = sorted(frozenset().union(*(w.batch_vars for w in words)))
        if batch_vars and kind != "self":
            rank_only = kind == "spawner" and _rank_args_only(words, set(batch_vars))
            dynamic = rank_only and _dynamic_rendezvous(words)
            lines = sorted(frozenset().union(*(w.batch_lines for w in words)))
            yield _expanded(launch.line, batch_vars, dynamic, lines)
        if kind == "spawner":
            literal = _literal_node_rank(words)
            multi = (step.nodes or self.res.nodes or 1) > 1
            if literal is not None and multi and not _dynamic_rendezvous(words):
                yield _same_node_rank(launch.line, literal)
            elif multi and not batch_vars:
                yield from _implicit_node_rank(launch.line, words)
        if kind == "python" and step.gpus_per_node and step.tasks_per_node:
            yield from self._gpus_vs_tasks(launch, step)
        if kind == "self":  # `srun noderun run`: one agent per node, or --mode srun
            program = [w.text for w in words]
            # srun's own --ntasks-per-node that Slurm 22.05 ignores (see _Step): a warning
            sure = Severity.WARNING if step.ignored_per_node is not None else Severity.ERROR
            for code, problem, fix in noderun_under_srun(program, program, step.tasks_per_node):
                yield Finding(launch.line, sure, code, problem, fix)

    def _gpus_vs_tasks(self, launch: _Launch, step: _Step) -> Iterator[Finding]:
        tasks, gpus = step.tasks_per_node, step.gpus_per_node
        assert tasks is not None and gpus is not None
        if tasks == gpus:
            return
        fix = f"#SBATCH --ntasks-per-node={gpus} (one task per GPU), or --gpus-per-node={tasks}"
        sure = self._is_distributed(launch)
        unsure = " (fine only if the tasks are not ranks of one distributed program)"
        if tasks > gpus:
            problem = (
                f"srun starts {tasks} task(s) per node but the job has {gpus} GPU(s) per node: "
                "ranks share a GPU (NCCL fails with 'Duplicate GPU detected')"
            )
            severity = Severity.ERROR if sure else Severity.WARNING
            yield Finding(
                launch.line, severity, "gpus-vs-tasks", problem + ("" if sure else unsure), fix
            )
            return
        problem = (
            f"srun starts {tasks} task(s) per node but the job has {gpus} GPU(s) per node: "
            "one rank per GPU needs as many tasks as GPUs"
        )
        multi = (step.nodes or self.res.nodes or 1) > 1
        res = self.res
        capped = (
            res.ntasks is not None
            and res.ntasks_per_node is not None
            and res.ntasks < res.ntasks_per_node * (res.nodes or 1)
        )
        if capped:
            problem += (
                f" (--ntasks={res.ntasks} caps the job below --ntasks-per-node="
                f"{res.ntasks_per_node})"
            )
        if sure and (tasks > 1 or capped or (multi and self.lightning)):
            yield Finding(launch.line, Severity.ERROR, "gpus-vs-tasks", problem, fix)
        else:
            yield Finding(
                launch.line,
                Severity.WARNING,
                "gpus-vs-tasks",
                problem + " (fine only if each process drives several GPUs itself)",
                fix,
            )

    def _is_distributed(self, launch: _Launch) -> bool:
        """Whether the script or (with file checks) the program shows it is one rank of many."""
        if self.distributed:
            return True
        path = _script_argument(list(launch.words), "python")
        if self.submit_dir is None or path is None or UNKNOWN in path:
            return False
        for base in (self._workdir(), self.script_dir):
            candidate = (base / path) if base is not None else Path(path)
            try:
                if candidate.is_file():
                    with candidate.open(encoding="utf-8", errors="replace") as handle:
                        return bool(_DISTRIBUTED_CODE.search(handle.read(256 * 1024)))
            except OSError:
                return False
        return False

    def _check_script_path(self, launch: _Launch, kind: str) -> Iterator[Finding]:
        if self.submit_dir is None or launch.cd_before or launch.in_container:
            return
        path = _script_argument(list(launch.words), kind)
        if path is None or not path.endswith(".py") or UNKNOWN in path or "$" in path:
            return
        candidate = Path(path).expanduser()
        if candidate.is_absolute():
            if not candidate.exists():
                yield Finding(
                    launch.line,
                    Severity.WARNING,
                    "script-not-found",
                    f"{path} does not exist on this machine",
                    "check the path (it must exist on the compute nodes)",
                )
            return
        bases = [self._workdir(), self.script_dir]
        if any(base is not None and (base / candidate).exists() for base in bases):
            return
        yield Finding(
            launch.line,
            Severity.ERROR,
            "script-not-found",
            f"{path} does not exist in the submit directory ({self._workdir()}) nor beside the "
            "batch script: the job fails at once with 'No such file or directory'",
            "fix the path, or submit from the directory that holds it",
        )

    def _workdir(self) -> Path | None:
        if self.submit_dir is None:
            return None
        chdir = self.res.chdir
        if chdir and "%" not in chdir and "$" not in chdir:
            return self.submit_dir / Path(chdir).expanduser()
        return self.submit_dir

    def _check_outputs(self) -> Iterator[Finding]:
        for number, option, path in self.res.outputs:
            folder = path.rsplit("/", 1)[0] if "/" in path else ""
            if not folder or folder == ".":
                continue
            made_later = any(_same_dir(folder, made) for made in self.mkdirs)
            severity = Severity.ERROR
            if _OUTPUT_PATTERN.search(folder):
                what = (
                    "names a folder that cannot exist before the job starts "
                    "(sbatch never creates folders)"
                )
            elif "$" in folder:
                continue
            elif (missing := self._folder_missing(folder)) is None:
                if not made_later:
                    continue
                what = (
                    "is created by this script only after sbatch opened the file; on a clean "
                    "checkout the job fails with no output"
                )
                severity = Severity.WARNING
            elif not missing:
                continue
            elif made_later:
                what = (
                    "does not exist, and this script creates it only after sbatch needed it: "
                    "the job fails with no output"
                )
            elif not Path(folder).expanduser().is_absolute():
                what = "does not exist where the job starts: the job fails with no output"
            else:
                continue
            yield _output_dir(number, option, folder, what, severity)

    def _folder_missing(self, folder: str) -> bool | None:
        """Whether the folder is absent (None: no file checks asked for)."""
        if self.submit_dir is None:
            return None
        path = Path(folder).expanduser()
        if path.is_absolute():
            return not path.is_dir()
        bases = [self._workdir(), self.script_dir]
        return not any(base is not None and (base / path).is_dir() for base in bases)


# --- directives ----------------------------------------------------------------------------
def _directives(text: str) -> tuple[_Resources, list[Finding]]:
    """#SBATCH options up to the first command (sbatch stops reading them there)."""
    res, late, commands_seen = _Resources(), [], False
    for number, raw in enumerate(text.split("\n"), start=1):
        stripped = raw.strip()
        if stripped.startswith("#SBATCH"):
            if commands_seen:
                late.append(_late(number, stripped))
                continue
            _read_directive(stripped[len("#SBATCH") :], number, res)
        elif stripped and not stripped.startswith("#"):
            commands_seen = True
    return res, late


def _late(number: int, directive: str) -> Finding:
    try:
        words = shlex.split(directive[len("#SBATCH") :], comments=True)
    except ValueError:
        words = []
    names = [name for name, _ in _options(words)]
    resource = any(n in _RESOURCE_DIRECTIVES or n in _RESOURCE_DIRECTIVES_2 for n in names)
    return Finding(
        number,
        Severity.ERROR if resource else Severity.WARNING,
        "late-directive",
        "#SBATCH after the first command is ignored by sbatch"
        + (" (this one changes the job's nodes, tasks, GPUs or partition)" if resource else ""),
        "move every #SBATCH line above the first command (a broken '#SBATCH' line counts as one)",
    )


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
        elif name in ("--ntasks-per-node", "--tasks-per-node"):
            res.ntasks_per_node = _first_int(value)
        elif name == "--gpus-per-node":
            res.gpus_per_node = _first_int(value.rsplit(":", 1)[-1])
        elif name == "--gres":
            count = _gres_gpus(value)
            if count is not None:
                res.gpus_per_node = count
        elif name == "--gpus-per-task":
            res.gpus_per_task = _first_int(value.rsplit(":", 1)[-1])
        elif name in ("--gpus", "-G"):
            res.gpus_total = _first_int(value.rsplit(":", 1)[-1])
        elif name in ("--chdir", "-D"):
            res.chdir = value
        elif name in ("--output", "-o", "--error", "-e"):
            res.outputs.append((number, name, value))


def _gres_gpus(value: str) -> int | None:
    for item in value.split(","):
        parts = item.split(":")
        if parts[0] == "gpu":
            return _first_int(parts[-1]) if len(parts) > 1 and parts[-1][:1].isdigit() else 1
    return None


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


def _int(value: str | None) -> int | None:
    if value is None or UNKNOWN in value:
        return None
    return _first_int(value) if re.fullmatch(r"\s*\d+\s*", value) else None


# --- commands ------------------------------------------------------------------------------
def _dequote_for_join(value_text: str) -> str:
    """The raw value of ``NAME=value`` as the inside of one double-quoted word."""
    out, i, n = [], 0, len(value_text)
    while i < n:
        ch = value_text[i]
        if ch == "'":
            end = value_text.find("'", i + 1)
            end = n if end < 0 else end
            out.append(
                value_text[i + 1 : end]
                .replace("\\", "\\\\")
                .replace("$", "\\$")
                .replace('"', '\\"')
                .replace("`", "\\`")
            )
            i = end + 1
        elif ch == '"':
            i += 1
            while i < n and value_text[i] != '"':
                if value_text[i] == "\\" and i + 1 < n:
                    out.append(value_text[i : i + 2])
                    i += 2
                    continue
                out.append(value_text[i])
                i += 1
            i += 1
        elif ch == "\\" and i + 1 < n:
            nxt = value_text[i + 1]
            out.append("\\" + nxt if nxt in '$`"\\' else nxt)
            i += 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def _function_name(text: str) -> str | None:
    match = re.match(r"(?:function\s+)?([A-Za-z_][\w-]*)\s*\(\)\s*\{?\s*$", text) or re.match(
        r"function\s+([A-Za-z_][\w-]*)\s*\{?\s*$", text
    )
    return match.group(1) if match else None


def _function_body(
    commands: list[RawCommand], i: int, header: RawCommand
) -> tuple[list[RawCommand], int]:
    body: list[RawCommand] = []
    depth = 1 if header.text.rstrip().endswith("{") else 0
    if depth == 0 and i < len(commands) and commands[i].text.strip() == "{":
        depth, i = 1, i + 1
    while i < len(commands):
        text = commands[i].text.strip()
        if text == "}" or text.startswith("} "):
            depth -= 1
            if depth <= 0:
                return body, i + 1
        elif text.endswith("{") and _function_name(text) is None:
            depth += 1
        body.append(commands[i])
        i += 1
    return body, i


def _heredoc_target(words: list[Word]) -> str | None:
    """The file ``cat > FILE <<EOF`` writes."""
    if not words or _base(words[0].text) not in ("cat", "tee"):
        return None
    for k, w in enumerate(words):
        if w.text in (">", ">>") and k + 1 < len(words):
            return words[k + 1].text
        if w.text.startswith(">") and len(w.text) > 1 and not w.text.startswith(">&"):
            return w.text.lstrip(">")
    if _base(words[0].text) == "tee" and len(words) > 1:
        return words[-1].text
    return None


_REDIRECT = re.compile(r"^\d*(<<-?|<<<|<>|<|>>|>\||>|&>>|&>|>&)")


def _strip_redirections(words: list[Word]) -> list[Word]:
    """The command without its redirections (``2>&1``, ``> log``, ``<<'EOF'`` …)."""
    out: list[Word] = []
    skip = False
    for word in words:
        if skip:
            skip = False
            continue
        match = _REDIRECT.match(word.text)
        if match:
            skip = match.end() == len(word.text)
            continue
        out.append(word)
    return out


def _base(word: str) -> str:
    return word.rsplit("/", 1)[-1]


def _unwrap(words: list[Word]) -> list[Word]:
    """Drop ``VAR=x``, ``env``, ``exec``, ``nohup``, ``numactl …`` before the real program."""
    i = 0
    while i < len(words):
        text = words[i].text
        base = _base(text)
        if assignment(text) and (
            i == 0 or _base(words[i - 1].text) in _WRAPPERS or assignment(words[i - 1].text)
        ):
            i += 1
        elif base in _WRAPPERS:
            i += 1
            while i < len(words) and words[i].text.startswith("-"):
                i += 1
        elif base in ("numactl", "taskset", "nsys", "ncu", "timeout"):
            i += 1
            while i < len(words) and (words[i].text.startswith("-") or words[i].text[:1].isdigit()):
                i += 1
            if base == "nsys" and i < len(words) and words[i].text == "profile":
                i += 1
                while i < len(words) and words[i].text.startswith("-"):
                    i += 1
        elif base in ("uv", "poetry", "pixi") and i + 1 < len(words) and words[i + 1].text == "run":
            i += 2
            while i < len(words) and words[i].text.startswith("-"):
                i += 1
        elif base == "conda" and i + 1 < len(words) and words[i + 1].text == "run":
            i += 2
            while i < len(words) and words[i].text.startswith("-"):
                i += 2 if words[i].text in ("-n", "-p", "--name", "--prefix") else 1
        elif (
            base.endswith(".sh")
            and i + 1 < len(words)
            and _kind([*words[i + 1 :]], True) in ("python", "spawner")
        ):
            i += 1  # a wrapper script that runs the rest (install.sh python …)
        else:
            break
    return words[i:]


def _is_container(words: list[Word]) -> bool:
    return bool(words) and _base(words[0].text) in _CONTAINERS


def _strip_container(words: list[Word]) -> list[Word]:
    """The command run inside ``singularity exec IMAGE …`` / ``apptainer run … IMAGE …``."""
    if not _is_container(words):
        return words
    i = 1
    if i < len(words) and words[i].text in ("exec", "run", "shell"):
        i += 1
    while i < len(words) and words[i].text.startswith("-"):
        flag = words[i].text
        i += (
            1
            if "=" in flag
            or flag in ("--nv", "--rocm", "--cleanenv", "-e", "--contain", "--writable")
            else 2
        )
    if _base(words[0].text) != "singularity_wrapper":
        i += 1  # the image
    return words[i:]


def _srun_split(words: list[Word]) -> tuple[list[tuple[str, str]], list[Word]]:
    """srun's own options (name, value) and the command it runs."""
    options: list[tuple[str, str]] = []
    i = 0
    while i < len(words):
        text = words[i].text
        if not text.startswith("-") or text == "-":
            break
        if text.startswith("--"):
            if "=" in text:
                name, value = text.split("=", 1)
                options.append((name, value))
                i += 1
            elif (
                text in _SRUN_FLAGS
                or i + 1 >= len(words)
                or (
                    _kind(_unwrap(words[i + 1 :]), True)
                    and not words[i + 1].text.startswith("-")
                    and _looks_like_program(words[i + 1].text)
                )
            ):
                options.append((text, ""))
                i += 1
            else:
                options.append((text, words[i + 1].text))
                i += 2
        else:
            short = text[:2]
            if len(text) > 2:
                options.append((short, text[2:]))
                i += 1
            elif text[1:2] in _SHORT_WITH_VALUE and i + 1 < len(words):
                options.append((short, words[i + 1].text))
                i += 2
            else:
                options.append((short, ""))
                i += 1
    return options, words[i:]


def _looks_like_program(word: str) -> bool:
    base = _base(word)
    return bool(_PYTHON.match(base)) or base in (
        "torchrun",
        "accelerate",
        "deepspeed",
        "bash",
        "sh",
    )


def _gpus_from_options(opts: dict[str, str], tasks: int | None, nodes: int | None) -> int | None:
    if "--gres" in opts:
        return _gres_gpus(opts["--gres"])
    if "--gpus-per-node" in opts:
        return _int(opts["--gpus-per-node"].rsplit(":", 1)[-1])
    if "--gpus-per-task" in opts:
        per_task = _int(opts["--gpus-per-task"].rsplit(":", 1)[-1])
        return per_task * tasks if per_task is not None and tasks is not None else None
    for name in ("--gpus", "-G"):
        if name in opts:
            total = _int(opts[name].rsplit(":", 1)[-1])
            if total is None:
                return None
            return total // nodes if nodes else total
    return None


def _kind(program: list[Word], under_srun: bool) -> str:
    """'python' (one process), 'spawner' (starts workers on its node), 'self' or ''."""
    if not program:
        return ""
    words = [w.text for w in program]
    name = _base(words[0])
    if name == "torchrun":
        return "spawner"
    if name in ("noderun", "mpirun", "mpiexec", "horovodrun", "ray"):
        return "self"
    if name == "deepspeed":
        return "spawner" if under_srun else "self"
    if name == "accelerate":
        return "spawner" if len(words) > 1 and words[1] == "launch" else ""
    if _PYTHON.match(name):
        rest = words[1:]
        k = 0
        while k < len(rest) and rest[k].startswith("-") and rest[k] != "-m" and rest[k] != "-c":
            k += 1
        if k < len(rest) and rest[k] == "-c":
            return ""
        if k < len(rest) and rest[k] == "-m":
            module = rest[k + 1] if k + 1 < len(rest) else ""
            if module in (
                "torch.distributed.run",
                "torch.distributed.launch",
                "accelerate.commands.launch",
            ):
                return "spawner"
            if module in ("deepspeed.launcher.runner", "deepspeed"):
                return "spawner" if under_srun else "self"
            if module.split(".")[0] in ("noderun", "pip", "venv", "ensurepip", "http", "json"):
                return "self" if module.split(".")[0] == "noderun" else ""
            return "python"
        if k < len(rest) and (rest[k].endswith(".py") or UNKNOWN in rest[k] or "/" in rest[k]):
            return "python"
    return ""


def _script_argument(words: list[str] | list[Word], kind: str) -> str | None:
    texts = [w.text if isinstance(w, Word) else w for w in words]
    for text in texts[1:]:
        if text.endswith(".py") and not text.startswith("-"):
            return text
        if text == "-m" or text == "-c":
            return None
    return None


def _rank_args_only(words: list[Word], names: set[str]) -> bool:
    """Whether the batch-expanded ranks only feed the launcher's node-rank option."""
    for k, word in enumerate(words):
        if not word.batch_vars:
            continue
        previous = words[k - 1].text if k else ""
        if re.match(r"--(node[-_]rank|machine[-_]rank)=", word.text) or re.fullmatch(
            r"--(node[-_]rank|machine[-_]rank)", previous
        ):
            continue
        return False
    return True


def _option_value(texts: list[str], k: int) -> str:
    """The value of the option ``texts[k]``: after its ``=``, else the next word ("" at the end)."""
    if "=" in texts[k]:
        return texts[k].split("=", 1)[1]
    return texts[k + 1] if k + 1 < len(texts) else ""


def _dynamic_rendezvous(words: list[Word]) -> bool:
    """torchrun ignores --node_rank under the c10d/etcd rendezvous (ranks come from the store)."""
    texts = [w.text for w in words]
    for k, text in enumerate(texts):
        value = _option_value(texts, k)
        if re.match(r"--rdzv[-_]backend", text) and value in ("c10d", "etcd", "etcd-v2"):
            return True
        if re.match(r"--rdzv[-_]conf", text) and re.search(r"rdzv_backend=(c10d|etcd)", value):
            return True
    return False


def _implicit_node_rank(line: int, words: list[Word]) -> Iterator[Finding]:
    """A launcher srun starts on several nodes with no node rank and a static rendezvous: each
    node takes the default rank 0 (torchrun, torch.distributed.launch, accelerate launch)."""
    texts = [w.text for w in words]
    if _dynamic_rendezvous(words) or any(
        re.match(r"--(node[-_]rank|machine[-_]rank|standalone)\b", t) for t in texts
    ):
        return
    for k, text in enumerate(texts):
        previous = texts[k - 1] if k else ""
        takes_value = previous.startswith("--") and "=" not in previous
        if text.startswith(UNKNOWN) and not takes_value:
            return  # an expansion that may hold the rank
    nnodes = next(
        (
            _option_value(texts, k)
            for k, t in enumerate(texts)
            if re.fullmatch(r"--(nnodes|num[-_]machines)(=.*)?", t)
        ),
        None,
    )
    if nnodes is None or not nnodes.split(":")[-1].isdigit() or nnodes.split(":")[-1] == "1":
        return  # one node per launcher (the default) or not known: not this mistake
    address = re.compile(r"--(master[-_]addr|rdzv[-_]endpoint|main[-_]process[-_]ip)\b")
    if not any(address.match(t) for t in texts):
        return  # no rendezvous address given: a different setup (or a fragment), not this one
    accelerate = _base(texts[0]) == "accelerate" or "accelerate.commands.launch" in texts
    unsure = accelerate and any(t.startswith("--config") for t in texts)
    yield Finding(
        line,
        Severity.WARNING if unsure else Severity.ERROR,
        "same-node-rank",
        f"srun starts `{_command_text(words)}` on every node without a node rank and with a "
        "static rendezvous: every node takes the default rank 0 and the rendezvous never "
        "completes",
        "add --node_rank=\\$SLURM_NODEID (--machine_rank for accelerate) inside bash -c '…', or "
        "use --rdzv_backend=c10d --rdzv_endpoint=HOST:PORT",
    )


def _literal_node_rank(words: list[Word]) -> str | None:
    texts = [w.text for w in words]
    for k, text in enumerate(texts):
        if re.fullmatch(r"--(?:node[-_]rank|machine[-_]rank)(?:=.*)?", text):
            value = _option_value(texts, k)
            source = words[k] if "=" in text else (words[k + 1] if k + 1 < len(words) else None)
            if value.isdigit() and source is not None and not source.batch_vars:
                return value
    return None


def _same_dir(folder: str, made: str) -> bool:
    """Whether ``mkdir -p made`` creates ``folder``."""
    a = folder.rstrip("/").removeprefix("./")
    b = made.rstrip("/").removeprefix("./")
    return a == b or b.startswith(a + "/")


# --- findings ------------------------------------------------------------------------------
def _command_text(words: tuple[Word, ...] | list[Word], limit: int = 4) -> str:
    texts = [display(w.text) for w in words]
    return " ".join(texts[:limit]) + (" …" if len(texts) > limit else "")


def _missing_srun(launch: _Launch, res: _Resources, sure: bool) -> Finding:
    tasks = res.ntasks or (res.ntasks_per_node or 1) * (res.nodes or 1)
    full = " ".join(display(w.text) for w in launch.words)
    problem = (
        f"`{_command_text(launch.words)}` is not under srun, but the job asks for {tasks} tasks: "
        f"one process starts, waits for {tasks - 1} that never exist, and the job hangs until "
        "its timeout"
    )
    if not sure:
        problem += " (if it is one rank of a distributed program; a single process needs 1 task)"
    return Finding(
        launch.line,
        Severity.ERROR if sure else Severity.WARNING,
        "missing-srun",
        problem,
        f"srun {full}",
    )


def _launcher_once(launch: _Launch, res: _Resources) -> Finding:
    name = _base(launch.words[0].text)
    return Finding(
        launch.line,
        Severity.ERROR,
        "torchrun-once",
        f"`{_command_text(launch.words)}` runs once for the whole job, on the first of "
        f"{res.nodes} nodes; the other nodes never start their workers",
        f"start one {name} per node: srun --ntasks-per-node=1 bash -c "
        "'… --node_rank=$SLURM_NODEID …' (single quotes), or `noderun submit`",
    )


def _launcher_per_task(
    launch: _Launch, tasks: int, sure: bool, ignored: int | None = None
) -> Finding:
    problem = (
        f"`{_command_text(launch.words)}` starts its own workers, but srun starts it {tasks} "
        f"times per node (once per task): {tasks} launchers per node each start a full set of "
        "workers on the same GPUs"
    )
    if ignored is not None:
        problem += (
            f" (srun ignores its --ntasks-per-node={ignored}: without -n it takes the job's "
            'task count, and warns "can\'t honor --ntasks-per-node")'
        )
    if not sure:
        problem += (
            " if srun ignores its --ntasks-per-node against the job's task count (Slurm 22.05 "
            "does even with -N; newer releases honour it with -N)"
        )
    return Finding(
        launch.line,
        Severity.ERROR if sure else Severity.WARNING,
        "launcher-per-task",
        problem,
        "run the launcher once per node: #SBATCH --ntasks-per-node=1, or srun -N$SLURM_NNODES "
        "-n$SLURM_NNODES --ntasks-per-node=1 (with -n), or drop the launcher and let srun start "
        "one task per GPU",
    )


def _expanded(line: int, names: list[str], warning: bool, where: list[int]) -> Finding:
    shown = ", ".join(f"${n}" for n in names)
    at = f" (in the assignment on line {', '.join(map(str, where))})" if where else ""
    problem = (
        f"{shown} is expanded by the batch shell{at} on the first node before srun runs, so "
        "every task gets that node's value (all nodes become node 0)"
    )
    if warning:
        problem += "; torchrun's c10d rendezvous ignores --node_rank, so only the logs are wrong"
    return Finding(
        line,
        Severity.WARNING if warning else Severity.ERROR,
        "expands-in-batch-shell",
        problem,
        f"escape it (\\${names[0]}) or single-quote the bash -c string, so each task expands it",
    )


def _same_node_rank(line: int, value: str) -> Finding:
    return Finding(
        line,
        Severity.ERROR,
        "same-node-rank",
        f"srun starts the launcher on every node with the same --node_rank={value}: the nodes "
        "all claim one rank and the rendezvous never completes",
        "pass --node_rank=\\$SLURM_NODEID inside bash -c '…' (or use --rdzv_backend=c10d)",
    )


def _unexported(line: int, name: str) -> Finding:
    return Finding(
        line,
        Severity.ERROR,
        "unexported-variable",
        f"${name} is set in the batch script without export, but the shell srun starts on each "
        "task reads it: there it is empty",
        f"export {name} before srun (or expand it in the batch shell: double quotes)",
    )


def _output_dir(number: int, option: str, folder: str, what: str, severity: Severity) -> Finding:
    return Finding(
        number,
        severity,
        "output-dir-missing",
        f"#SBATCH {option} folder {folder}/ {what}",
        f"create it before sbatch (mkdir -p {folder}) or write the log beside the script",
    )


def _line_checks(text: str) -> Iterator[Finding]:
    for command in split_commands(text):
        if command.text.startswith("#"):
            continue
        line_text = command.text
        match = _FIXED_PORT.search(line_text)
        if match:
            port = next(g for g in match.groups() if g)
            yield Finding(
                command.line,
                Severity.WARNING,
                "fixed-port",
                f"fixed port {port}: two jobs that share a node both take it, and the second "
                "fails with 'Address already in use'",
                "derive it from the job id: export MASTER_PORT=$((20000 + SLURM_JOB_ID % 20000))",
            )
        match = _CUDA_VISIBLE.search(line_text)
        if match:
            value = match.group(1)
            for name in _GLOBAL_RANK_VARS:
                if re.search(r"\$\{?" + name + r"\b", value) or re.search(r"\(\(\s*" + name, value):
                    yield Finding(
                        command.line,
                        Severity.ERROR,
                        "global-rank-device",
                        "CUDA_VISIBLE_DEVICES is set from the global rank "
                        f"(${name}): on every node but the first it names a GPU that does not "
                        "exist (invalid device ordinal)",
                        "do not set it by hand; let SLURM bind GPUs (--gpus-per-task) or use the "
                        "local rank ($SLURM_LOCALID / LOCAL_RANK) as the device index",
                    )
                    break


__all__ = ["PER_TASK", "Finding", "Severity", "lint_sbatch", "script_language"]
