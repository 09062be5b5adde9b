"""``srun noderun run …``: each task of the user's srun step is one node (or one rank) of ONE job.

The batch-script path (``run_slurm``) starts ``srun … python -m noderun.node`` itself and
supervises the step from outside. Here the step already exists, so every task does what one of
that step's tasks does — it runs the same ``StepPlan.node_argv()`` (the node entry: the
check-in gate, MASTER_ADDR check, torchrun or the rank itself) as a child, through a
``StepSupervisor`` (per-rank logs, ``node:rank|`` prefixes). Each task leaves
``logs/task<T>.result.json``; task 0 runs its node under ``supervise()`` like the batch path's
launcher: it gathers the results, names the first failure and writes the one run.json.

Every check that can refuse runs first, identically on every task, so a bad command line gets
one line from every node, exit 2, and nothing started.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from noderun import rundir, secret_env, timeline
from noderun.backends.result import Failure, Result, WorkerExit
from noderun.backends.slurm_step import StepBackend, StepSupervisor, spawn
from noderun.backends.supervise import Policy, supervise
from noderun.errors import NoderunError, UsageError
from noderun.plan.slurm import LaunchMode, StepPlan
from noderun.run_record import RunRecord
from noderun.topology import in_slurm_step, slurm_job_id, tasks_per_node
from noderun.verbs import run_slurm
from noderun.verbs.torchrun_flags import NPROC_WORDS, TorchrunFlags, local_gpus, run_name

RESULT = "task{}.result.json"
_PEER_POLL_SECONDS = 0.5  # how often a task looks for another task's failure
_STOP_GRACE_SECONDS = 5.0  # SIGTERM, then SIGKILL
_GATHER_SECONDS = 60.0  # after task 0's own node ended: how long the other tasks may take
_FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2)


def wanted(args: argparse.Namespace, environ: Mapping[str, str]) -> bool:
    """``noderun run`` started by srun inside a job, not over SSH. torchrun's static form
    (``--node-rank $SLURM_NODEID --master-addr NODE0``) is the same one job: preflight checks
    that the rank and address are this task's node and node 0."""
    over_ssh = bool(getattr(args, "hosts", None))
    return in_slurm_step(environ) and bool(environ.get("SLURM_JOB_ID")) and not over_ssh


def _int(environ: Mapping[str, str], name: str, default: int = 0) -> int:
    raw = environ.get(name, "").strip()
    return int(raw) if raw.isdigit() else default


class StepFacts:
    """Where this task sits in the user's srun step (read once from the step's variables)."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self.job_id = environ["SLURM_JOB_ID"]
        self.step_id = environ.get("SLURM_STEP_ID") or environ.get("SLURM_STEPID") or "0"
        self.nodelist = environ.get("SLURM_STEP_NODELIST") or environ.get("SLURM_JOB_NODELIST", "")
        self.per_node = tasks_per_node(environ.get("SLURM_STEP_TASKS_PER_NODE", "") or "1")
        self.nnodes = _int(environ, "SLURM_STEP_NUM_NODES") or len(self.per_node) or 1
        self.node = _int(environ, "SLURM_NODEID")
        self.task = _int(environ, "SLURM_PROCID")
        self.host = environ.get("SLURMD_NODENAME", "") or os.uname().nodename

    @property
    def tasks(self) -> int:
        return sum(self.per_node) if len(self.per_node) == self.nnodes else self.nnodes

    def where(self) -> str:
        return f"task {self.task} on {self.host} (step {self.job_id}.{self.step_id})"


def preflight(args: argparse.Namespace, flags: TorchrunFlags, facts: StepFacts) -> LaunchMode:
    """The refusals every task makes alike, before anything starts: the launch mode, or
    UsageError naming the mistake and the srun line that fixes it."""
    mode = LaunchMode(args.mode)
    per = set(facts.per_node)
    if len(per) > 1:
        raise UsageError(
            f"the srun step runs {'/'.join(map(str, facts.per_node))} tasks on its nodes; "
            "noderun needs the same number on every node",
            "srun --ntasks-per-node=1 noderun run … (or N with --mode srun)",
        )
    here = per.pop() if per else 1
    if mode is LaunchMode.TORCHRUN and here != 1:
        raise UsageError(
            f"srun started {here} `noderun run` tasks on each node: {here} torchrun agents per "
            "node would each start their own ranks",
            "srun --ntasks-per-node=1 noderun run … (one agent per node), or add --mode srun "
            "for one task per rank",
        )
    nproc = args.nproc_per_node
    if mode is LaunchMode.SRUN and nproc not in (1, here):
        raise UsageError(
            f"--mode srun with --nproc-per-node {nproc}, but srun started {here} task(s) per "
            "node: in srun mode every task is one rank",
            f"srun --ntasks-per-node={nproc} noderun run --mode srun …, or drop --nproc-per-node",
        )
    node_rank = getattr(args, "node_rank", None)
    if node_rank is not None and node_rank != facts.node:
        raise UsageError(
            f"--node-rank {node_rank}, but this task runs on node {facts.node} of the srun step",
            "pass --node-rank $SLURM_NODEID (srun bash -c '…'), or drop it: srun noderun run "
            "numbers the nodes itself",
        )
    if args.nnodes is not None and args.nnodes != facts.nnodes:
        raise UsageError(
            f"--nnodes {args.nnodes}, but the srun step has {facts.nnodes} node(s)",
            f"srun --nodes={args.nnodes} noderun run …, or drop --nnodes",
        )
    if flags.max_restarts:
        raise UsageError(
            "--max-restarts inside an srun step: a step cannot start itself again",
            "run `noderun run --max-restarts N …` in the batch script without srun",
        )
    return mode


def default_run_dir(args: argparse.Namespace, flags: TorchrunFlags, facts: StepFacts) -> Path:
    """The same directory on every node: ``runs/<name>-<job>.<step>`` unless --run-dir."""
    if args.run_dir is not None:
        return Path(args.run_dir).resolve()
    root = flags.log_root or Path("runs")
    return (root / f"{run_name(args.script, flags.entry)}-{facts.job_id}.{facts.step_id}").resolve()


def build(
    args: argparse.Namespace, flags: TorchrunFlags, environ: Mapping[str, str], facts: StepFacts
) -> StepPlan:
    """The batch path's StepPlan for the step that already runs (its nodes, not the job's)."""
    mode = preflight(args, flags, facts)
    here = facts.per_node[0] if facts.per_node else 1
    step_args = copy.copy(args)
    step_args.mode = mode
    step_args.nnodes = facts.nnodes
    step_args.run_dir = default_run_dir(args, flags, facts)
    if mode is LaunchMode.SRUN:
        step_args.nproc_per_node = here
    env = {**environ, "SLURM_JOB_NODELIST": facts.nodelist}
    if args.nproc_per_node in NPROC_WORDS and not env.get("SLURM_GPUS_ON_NODE", "").isdigit():
        env["SLURM_GPUS_ON_NODE"] = str(local_gpus())  # this node's own, on every node
    return run_slurm.build_step(step_args, env, flags)


def _failed_peer(logs: Path, me: int) -> int | None:
    """Another task of this step that ended with a non-zero code, if any."""
    for path in logs.glob("task*.result.json"):
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            found = json.loads(path.read_text())
            if int(found["task"]) != me and int(found["exit_code"]) != 0:
                return int(found["task"])
    return None


class TaskSupervisor(StepSupervisor):
    """This task's node entry as a child, its output routed as srun's labelled lines would
    be; once it ended, task 0 gathers every task's result and names the first failure."""

    forwarded = _FORWARDED

    def __init__(self, step: StepPlan, facts: StepFacts, show: Callable[[int], bool] | None):
        super().__init__(step, show=show)
        self.facts, self.leader = facts, facts.task == 0
        self.label = facts.node if step.mode is LaunchMode.TORCHRUN else facts.task
        self.signalled: int | None = None
        self.code, self.codes = 1, dict[int, int]()

    def _popen(self) -> subprocess.Popen[str]:
        return spawn(self.plan.node_argv(), {**os.environ, **dict(self.plan.env)})

    def feed(self, raw: str) -> None:
        super().feed(f"{self.label}: {raw}")

    def _forward(self, signum: int, _frame: object) -> None:
        if signum in (signal.SIGTERM, signal.SIGINT):
            self.signalled = signum
        super()._forward(signum, _frame)

    def _ended(self) -> int:
        """The child's exit code; once another task reported a failure, the child is stopped
        (the user's srun may lack --kill-on-bad-exit: torchrun's agents would otherwise wait
        in their exit barrier for 300 s)."""
        proc, logs = self._proc, self.plan.run_dir / "logs"
        assert proc is not None
        while True:
            try:
                return proc.wait(timeout=_PEER_POLL_SECONDS)
            except subprocess.TimeoutExpired:
                pass
            if _failed_peer(logs, self.facts.task) is not None:  # another task failed first
                proc.send_signal(signal.SIGTERM)
                try:
                    return proc.wait(timeout=_STOP_GRACE_SECONDS)
                except subprocess.TimeoutExpired:
                    # torchrun's agent in its exit barrier sits in a C++ wait that defers the
                    # signal for up to 300 s; its workers have already ended by then
                    proc.kill()
                    return proc.wait()

    def result(self, code: int) -> Result:
        """This node's exit code in ``code``; on task 0, the whole step's result."""
        self.code = code
        self._write_result(code)
        if not self.leader:
            return Result(exit_code=code)
        self.codes = self._gather()
        worst = next((c for c in self.codes.values() if c != 0), 0)
        result = super().result(worst)
        if self.signalled is not None:
            result.interrupted_by = signal.Signals(self.signalled).name
            result.exit_code, result.failure = 128 + self.signalled, None
        return result

    def _write_result(self, code: int) -> None:
        result = {
            "task": self.facts.task,
            "node": self.facts.node,
            "host": self.facts.host,
            "exit_code": code,
            # what the node's output showed: the entry's errors, torchrun's failed workers and
            # the ranks' last error lines (the leader weighs them all for the first failure)
            "node_errors": self._node_errors,
            "worker_exits": {
                str(node): [dataclasses.asdict(e) for e in exits]
                for node, exits in self.router.worker_exits.items()
            },
            "last_error": {str(rank): line for rank, line in self.router.last_error.items()},
        }
        rundir.write_json_atomic(
            self.plan.run_dir / "logs" / RESULT.format(self.facts.task), result
        )

    def _gather(self) -> dict[int, int]:
        """Task 0: wait for every task's result, fold their findings into this one; task -> code
        (a task whose result never came counts as failed)."""
        logs = self.plan.run_dir / "logs"
        deadline = time.monotonic() + _GATHER_SECONDS
        codes: dict[int, int] = {}
        while len(codes) < self.facts.tasks and time.monotonic() < deadline:
            for task in range(self.facts.tasks):
                path = logs / RESULT.format(task)
                if task in codes or not path.exists():
                    continue
                with contextlib.suppress(OSError, ValueError):
                    found = json.loads(path.read_text())
                    codes[task] = int(found["exit_code"])
                    if task != self.facts.task:
                        self._node_errors.extend((int(t), str(m)) for t, m in found["node_errors"])
                        for node, exits in found["worker_exits"].items():
                            ended = [WorkerExit(**e) for e in exits]
                            self.router.worker_exits.setdefault(int(node), []).extend(ended)
                        for rank, line in found["last_error"].items():
                            self.router.last_error.setdefault(int(rank), str(line))
            if len(codes) < self.facts.tasks:
                time.sleep(0.1)
        for task in range(self.facts.tasks):
            codes.setdefault(task, 1)
        return codes


class TaskBackend(StepBackend):
    """This task's node of the user's srun step: ``supervise`` runs it on task 0, the other
    tasks only start and wait. The step is the user's: there is nothing to restart."""

    def __init__(
        self,
        step: StepPlan,
        facts: StepFacts,
        environ: Mapping[str, str],
        show: Callable[[int], bool] | None,
    ) -> None:
        command = secret_env.masked_argv(sys.argv)
        super().__init__(step, facts.job_id, command, False, show, known_as=slurm_job_id(environ))
        self.facts, self.what = facts, f"step {facts.job_id}.{facts.step_id}"
        self.task = TaskSupervisor(step, facts, show)

    def supervisor(self) -> StepSupervisor:
        return self.task

    def describe(self) -> RunRecord:
        record = super().describe()
        record.launch, record.step_command = "srun noderun run", None
        record.extra["step_id"] = self.facts.step_id
        return record

    def record(self, record: RunRecord, result: Result) -> None:
        record.extra["task_exit_codes"] = {str(k): v for k, v in sorted(self.task.codes.items())}


def _clear_results(step: StepPlan, facts: StepFacts, since: float) -> None:
    """A requeued job runs its steps again: last time's results (older than this task's start)
    must not count; a task that already ended this time keeps its own."""
    for task in range(facts.tasks):
        path = step.run_dir / "logs" / RESULT.format(task)
        with contextlib.suppress(FileNotFoundError):
            if path.stat().st_mtime < since:
                path.unlink()


def _refuse(facts: StepFacts, err: NoderunError) -> int:
    os.write(2, f"noderun: error: {err} [{facts.where()}]\n".encode())  # one write: shared output
    return err.exit_code


def main(args: argparse.Namespace, flags: TorchrunFlags, environ: Mapping[str, str]) -> int:
    facts = StepFacts(environ)
    try:
        step = build(args, flags, environ, facts)
    except NoderunError as err:
        return _refuse(facts, err)
    if args.dry_run:
        print(step.rank_table())
        print(" ".join(step.node_argv()))
        return 0
    since = timeline.process_start()
    backend = TaskBackend(step, facts, environ, flags.shown)
    task = backend.task
    if not task.leader:
        backend.start()
        backend.wait()
        return task.code if task.code in (0, 2) else 1
    _clear_results(step, facts, since)
    done = supervise(backend, Policy(), backend.describe(), lambda _: backend, since)
    refused = 2 in task.codes.values() and _refused(done.result.failure)
    return run_slurm.finish(done, step, environ, {}, steps_run=False, refused=refused)


def _refused(failure: Failure | None) -> bool:
    """The node entry refused (exit 2 from a usage error), rather than a rank failing."""
    return failure is not None and failure.rank is None
