"""SubmitRequest -> SbatchPlan: the whole sbatch script as a value. Pure: no I/O, no processes.

``str(plan)`` is the script a user would get. Every user string that lands in shell text
goes through ``shlex.quote``; ``#SBATCH`` values (parsed by sbatch, not by a shell) are
restricted to characters that need no quoting, and refused otherwise.
"""

from __future__ import annotations

import dataclasses
import re
import shlex
import sys
from pathlib import Path

from noderun.errors import UsageError
from noderun.plan.launch import Entry
from noderun.plan.slurm import DEFAULT_JOIN_TIMEOUT, LaunchMode, StepPlan
from noderun.plan.stall import StallPolicy

_TIME = re.compile(
    r"^(\d+|\d+:\d{1,2}|\d+:\d{1,2}:\d{1,2}|\d+-\d{1,2}|\d+-\d{1,2}:\d{1,2}"
    r"|\d+-\d{1,2}:\d{1,2}:\d{1,2}|UNLIMITED|INFINITE)$"
)
_MEM = re.compile(r"^\d+[KMGT]?$")
_NAME = re.compile(r"^[A-Za-z0-9_.+-]+$")
_SIGNAL = re.compile(r"^(?:[BR]{1,2}:)?(?:SIG)?[A-Z0-9]+(?:@\d+)?$")
_ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SBATCH_PATH = re.compile(r"^[^\s'\"\\%$`]+$")  # no quoting needed in an #SBATCH line
# values of #SBATCH options: gres gpu:a100:8, constraint "a&(b|c)", nodelist n[1-3], dependency
# afterok:1:2 — never a space, quote, backslash, '$', '`', '%', '#' or ';'
_SBATCH_VALUE = re.compile(r"^[A-Za-z0-9_.,:=+\-\[\]@/|&()!*<>]+$")
_SBATCH_ARG = re.compile(r"^--([a-z][a-z0-9-]*)(?:=(.+))?$")
# options noderun sets itself: passing them through would contradict the plan
_OWNED = {
    "nodes": "--nodes", "ntasks": "--nproc-per-node", "ntasks-per-node": "--nproc-per-node",
    "cpus-per-task": "--cpus-per-task", "output": "--run-dir", "error": "--run-dir",
    "chdir": "the directory you submit from", "wrap": "SCRIPT", "open-mode": "--requeue",
    "parsable": "noderun's own output", "test-only": "--dry-run", "array": "one job per submit",
}  # fmt: skip


@dataclasses.dataclass(frozen=True)
class SubmitRequest:
    """What ``noderun submit`` was asked for; :meth:`materialize` checks and renders it."""

    script: str  # absolute path
    run_dir: Path  # absolute, on the shared filesystem
    workdir: Path  # the job's working directory
    script_args: tuple[str, ...] = ()
    nodes: int = 1
    nproc_per_node: int = 1
    mode: LaunchMode = LaunchMode.TORCHRUN
    partition: str | None = None
    account: str | None = None
    time: str | None = None
    cpus_per_task: int = 1  # per rank
    mem: str | None = None
    gpus_per_node: int | None = None
    job_name: str | None = None
    env: tuple[tuple[str, str], ...] = ()
    setup: str | None = None
    requeue: bool = False
    signal: str | None = None
    master_port: int | None = None
    join_timeout: float = DEFAULT_JOIN_TIMEOUT
    python: str = sys.executable
    stall: StallPolicy = dataclasses.field(default_factory=StallPolicy)
    # another noderun verb the job runs, e.g. ("doctor", "--run-dir", D); () = `noderun run`
    command: tuple[str, ...] = ()
    entry: Entry = Entry.SCRIPT  # script, -m module, or --no-python executable
    run_flags: tuple[str, ...] = ()  # more `noderun run` options (torchrun's, e.g. restarts)
    gres: str | None = None
    exclusive: bool = False
    constraint: str | None = None
    qos: str | None = None
    reservation: str | None = None
    exclude: str | None = None
    nodelist: str | None = None
    dependency: str | None = None
    sbatch_args: tuple[str, ...] = ()  # any other sbatch option, e.g. "--mail-type=END"

    def extra_options(self) -> list[tuple[str, str | None]]:
        """The first-class extras and ``--sbatch-arg``s as (name, value or None) pairs."""
        named = [
            ("gres", self.gres), ("constraint", self.constraint), ("qos", self.qos),
            ("reservation", self.reservation), ("exclude", self.exclude),
            ("nodelist", self.nodelist), ("dependency", self.dependency),
        ]  # fmt: skip
        pairs: list[tuple[str, str | None]] = [(k, v) for k, v in named if v is not None]
        if self.exclusive:
            pairs.append(("exclusive", None))
        for arg in self.sbatch_args:
            match = _SBATCH_ARG.match(arg)
            if match:
                pairs.append((match.group(1), match.group(2)))
        return pairs

    def check_extras(self) -> None:
        """Each extra option must be one sbatch can read from an #SBATCH line, unquoted, and
        not one noderun sets itself."""
        for arg in self.sbatch_args:
            match = _SBATCH_ARG.match(arg)
            if not match:
                raise UsageError(
                    f"--sbatch-arg {arg!r} is not --option or --option=value",
                    "pass sbatch's long form, e.g. --sbatch-arg=--mail-type=END",
                )
            if match.group(1) in _OWNED:
                raise UsageError(
                    f"--sbatch-arg {arg!r}: noderun sets --{match.group(1)} itself",
                    f"use {_OWNED[match.group(1)]} instead",
                )
        for name, value in self.extra_options():
            if value is not None and not _SBATCH_VALUE.match(value):
                raise UsageError(
                    f"--{name} {value!r} has characters an #SBATCH line cannot carry",
                    "no spaces, quotes, '$', '`', '%', '#' or ';' in sbatch option values",
                )

    def check(self) -> None:
        """Refuse what sbatch would refuse (or misread), with the fix, before anything exists."""
        if self.nodes < 1 or self.nproc_per_node < 1 or self.cpus_per_task < 1:
            raise UsageError(
                f"--nodes {self.nodes}, --nproc-per-node {self.nproc_per_node} and "
                f"--cpus-per-task {self.cpus_per_task} must all be at least 1",
                "pass positive counts",
            )
        if self.time is not None and not _TIME.match(self.time):
            raise UsageError(
                f"--time {self.time!r} is not a SLURM time",
                "use MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS (e.g. --time 01:30:00)",
            )
        if self.mem is not None and not _MEM.match(self.mem):
            raise UsageError(f"--mem {self.mem!r} is not a size", "use e.g. --mem 16G or 4000M")
        for flag, value in (
            ("--partition", self.partition),
            ("--account", self.account),
            ("--job-name", self.job_name),
        ):
            if value is not None and not _NAME.match(value):
                raise UsageError(
                    f"{flag} {value!r} has characters sbatch cannot take",
                    "use letters, digits, '.', '_', '+' and '-'",
                )
        if self.signal is not None and not _SIGNAL.match(self.signal):
            raise UsageError(
                f"--signal {self.signal!r} is not a SLURM signal spec",
                "use [B:]SIG[@seconds], e.g. --signal USR1@90",
            )
        if self.gpus_per_node is not None and self.nproc_per_node > self.gpus_per_node:
            raise UsageError(
                f"--nproc-per-node {self.nproc_per_node} > --gpus-per-node {self.gpus_per_node}",
                "run one process per GPU: --nproc-per-node <= --gpus-per-node",
            )
        for key, _ in self.env:
            if not _ENV_KEY.match(key):
                raise UsageError(
                    f"--env name {key!r} is not a variable name", "use --env NAME=VALUE"
                )
        self.check_extras()
        for what, path in (("run directory", self.run_dir), ("working directory", self.workdir)):
            if not _SBATCH_PATH.match(str(path)):
                raise UsageError(
                    f"{what} {str(path)!r} has spaces, quotes, '%' or '$', which #SBATCH lines "
                    "cannot carry",
                    "choose a path without them (--run-dir)",
                )

    def step(self) -> StepPlan:
        """The srun step the job will run (hosts are known only once it is allocated)."""
        return StepPlan(
            mode=self.mode,
            nnodes=self.nodes,
            nproc_per_node=self.nproc_per_node,
            run_dir=self.run_dir,
            script=self.script,
            script_args=self.script_args,
            join_timeout=self.join_timeout,
            master_port=self.master_port,
            python=self.python,
            entry=self.entry,
        )

    def materialize(self) -> SbatchPlan:
        self.check()
        return SbatchPlan(self, self.step())


@dataclasses.dataclass(frozen=True)
class SbatchPlan:
    """The rendered job: ``str(plan)`` is the whole sbatch script."""

    request: SubmitRequest
    step: StepPlan

    @property
    def job_name(self) -> str:
        req = self.request
        stem = req.script.rsplit(".", 1)[-1] if req.entry is Entry.MODULE else Path(req.script).stem
        return req.job_name or _NAME_SAFE.sub("_", stem)

    def directives(self) -> list[str]:
        """The ``#SBATCH`` options, in a fixed order (golden files pin it)."""
        req = self.request
        per_task_cpus = req.cpus_per_task * (
            req.nproc_per_node if req.mode is LaunchMode.TORCHRUN else 1
        )
        options: list[tuple[str, object]] = [
            ("job-name", self.job_name),
            ("nodes", req.nodes),
            ("ntasks-per-node", self.step.tasks_per_node),
            ("cpus-per-task", per_task_cpus),
            ("partition", req.partition),
            ("account", req.account),
            ("time", req.time),
            ("mem", req.mem),
            ("gpus-per-node", req.gpus_per_node),
            ("signal", req.signal),
            ("chdir", req.workdir),
            ("output", req.run_dir / "logs" / "slurm-%j.out"),
        ]
        lines = [f"#SBATCH --{key}={value}" for key, value in options if value is not None]
        lines += [
            f"#SBATCH --{key}" + ("" if value is None else f"={value}")
            for key, value in req.extra_options()
        ]
        if req.requeue:
            # a requeued job reuses its output file: append, or the first run's output is lost
            lines += ["#SBATCH --requeue", "#SBATCH --open-mode=append"]
        return lines

    def run_argv(self) -> list[str]:
        """The command the batch script ends with: ``noderun run`` inside the allocation."""
        req, step = self.request, self.step
        if req.command:
            return [req.python, "-m", "noderun", *req.command]
        argv = [
            req.python,
            "-m",
            "noderun",
            "run",
            f"--nnodes={req.nodes}",
            f"--nproc-per-node={req.nproc_per_node}",
            f"--mode={req.mode.value}",
            f"--run-dir={req.run_dir}",
            f"--join-timeout={step.join_timeout:g}",
        ]
        if req.master_port is not None:
            argv.append(f"--master-port={req.master_port}")
        argv += [*req.stall.argv(), *req.run_flags, *req.entry.flags()]
        return [*argv, req.script, *req.script_args]

    def __str__(self) -> str:
        req, step = self.request, self.step
        lines = [
            "#!/bin/bash",
            f"# noderun {req.command[0] if req.command else 'submit'}: {req.nodes} node(s) x "
            f"{req.nproc_per_node} = "
            f"{step.world_size} ranks, {req.mode.value} mode",
            *self.directives(),
            "set -eo pipefail",
        ]
        if req.setup:
            lines += ["# --setup, run as given:", req.setup]
        lines += [f"export {key}={shlex.quote(value)}" for key, value in req.env]
        lines.append(f"export NODERUN_RUN_DIR={shlex.quote(str(req.run_dir))}")
        if not req.command:
            lines += [
                "# noderun run starts this step on the allocated nodes and watches it:",
                f"#   {shlex.join(step.srun_options())} \\",
                f"#     {shlex.join(step.node_argv()[: -len(req.script_args) - 1])} SCRIPT ARGS",
            ]
        lines.append(shlex.join(["exec", *self.run_argv()]))
        return "\n".join(lines) + "\n"

    def dry_run_text(self) -> str:
        return f"{self}\n{self.step.rank_table()}\n"


_NAME_SAFE = re.compile(r"[^A-Za-z0-9_.+-]")
