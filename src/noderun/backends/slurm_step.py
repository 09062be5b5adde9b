"""Run a StepPlan's srun step inside an allocation: per-rank logs, ``node:rank`` console
prefixes, and the first failure named by rank and host."""

from __future__ import annotations

import dataclasses
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from noderun import failures, proc_guard, rundir
from noderun.backends.local import LocalSupervisor
from noderun.backends.log_router import LogRouter
from noderun.backends.ports import require_free_port
from noderun.backends.result import Failure, Result, seen_exits
from noderun.backends.supervise import RankPlace, rank_places
from noderun.plan.launch import Gang, plan_local
from noderun.plan.slurm import LaunchMode, StepPlan
from noderun.run_record import RunRecord, RunShape
from noderun.topology import port_for_job
from noderun.topology.contract import job_token

_LABEL = re.compile(r"^\s*(\d+): ?(.*)$", re.DOTALL)  # srun --label
_SRUN_TASK = re.compile(r"srun: error: (\S+): tasks? ([\d,\-]+): (.*)")
_SRUN_EXIT = re.compile(r"Exited with exit code (\d+)")
# srun's report once its --wait ran out after the first task ended, and when it gave up on the
# step: a task still "running" then is on a node whose slurmstepd no longer answers (lost)
_SRUN_STILL_RUNNING = re.compile(r"srun: StepId=\S+ tasks? ([\d,\-]+): running")
_SRUN_GAVE_UP = "Timed out waiting for job step to complete"
_SRUN_NODE_FAIL = re.compile(r"srun: error: Node failure on (\S+)")
_NODE_ERROR = "noderun.node: error: "
FORWARDED = (signal.SIGUSR1, signal.SIGUSR2)


class StepSupervisor:
    """Start ``srun`` for ``plan`` and route its labelled output to one log per rank."""

    forwarded: tuple[signal.Signals, ...] = FORWARDED  # passed on to srun

    def __init__(
        self,
        plan: StepPlan,
        console: IO[str] | None = None,
        show: Callable[[int], bool] | None = None,
    ) -> None:
        self.plan = plan
        self.logs = plan.run_dir / "logs"
        self._node_errors: list[tuple[int, str]] = []  # (node or rank task, message)
        self._srun_errors: list[tuple[str, str, str]] = []  # (host, tasks, text)
        self._still_running: set[int] = set()  # tasks srun saw running after its --wait
        self._srun_gave_up = False  # srun timed out waiting for the step to end
        self._failed_nodes: list[str] = []  # hosts srun reported a node failure of
        self._proc: subprocess.Popen[str] | None = None
        self._cancelled = False
        self._began = time.monotonic()
        self._threads: list[threading.Thread] = []
        self._handlers: dict[int, Any] = {}
        self.router = LogRouter(self.logs, console or sys.stdout, plan.nproc_per_node, show)

    def cancel(self) -> None:
        self._cancelled = True
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGTERM)  # srun forwards it and ends the step

    def roots(self) -> list[int]:
        return []  # the ranks run under slurmstepd, on the job's nodes

    def feed(self, raw: str) -> None:
        """One line of srun output: ``T: text`` (task T) or srun's own message."""
        line = raw.rstrip("\n")
        match = _LABEL.match(line)
        if not match:
            self.router.launcher_line("srun.log", line)
            if m := _SRUN_TASK.search(line):
                self._srun_errors.append((m.group(1), m.group(2), m.group(3).strip()))
            elif m := _SRUN_STILL_RUNNING.search(line):
                self._still_running |= _task_ids(m.group(1))
            elif m := _SRUN_NODE_FAIL.search(line):
                self._failed_nodes.append(m.group(1))
            elif _SRUN_GAVE_UP in line:
                self._srun_gave_up = True
            return
        task, text = int(match.group(1)), match.group(2)
        if self.plan.mode is LaunchMode.SRUN:
            self.router.rank_line(str(self.plan.node_of_rank(task)), task, text)
            if text.startswith(_NODE_ERROR):
                self._node_errors.append((task, text.removeprefix(_NODE_ERROR)))
        elif text.startswith(_NODE_ERROR):
            self._node_errors.append((task, text.removeprefix(_NODE_ERROR)))
            self.router.agent_line(task, text, console_line=f"{task}:-| {text}")
        else:
            self.router.torchrun_line(task, str(task), text)

    def _pump(self, stream: IO[str]) -> None:
        for line in iter(stream.readline, ""):
            self.feed(line)
        stream.close()

    def _forward(self, signum: int, _frame: object) -> None:
        """sbatch --signal=B:USR1@T lands here: pass it on (srun forwards it to every task)."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signum)

    def _popen(self) -> subprocess.Popen[str]:
        """srun for the whole step: its SIGTERM ends the step; SIGKILLed, it would leave the
        step running."""
        env = {**os.environ, **dict(self.plan.env), **job_token(os.environ)}
        return spawn(self.plan.srun_argv(), env, proc_guard.die_with_parent_hook(signal.SIGTERM))

    def start(self, on_output: Callable[[], None] | None = None) -> None:
        self.router.on_rank_output = on_output
        self.logs.mkdir(parents=True, exist_ok=True)
        self._handlers = {s: signal.signal(s, self._forward) for s in self.forwarded}
        self._began = time.monotonic()
        try:
            self._proc = self._popen()
        except BaseException:
            self._restore()
            raise
        for stream in (self._proc.stdout, self._proc.stderr):
            assert stream is not None
            thread = threading.Thread(target=self._pump, args=(stream,), daemon=True)
            thread.start()
            self._threads.append(thread)

    def _restore(self) -> None:
        for s, handler in self._handlers.items():
            signal.signal(s, handler)

    def wait(self, on_end: Callable[[], None] | None = None) -> Result:
        try:
            code = self._ended()
            if on_end is not None:
                on_end()
        finally:
            for thread in self._threads:
                thread.join(timeout=10)
            self._restore()
            self.router.close()
        return self.result(code)

    def _ended(self) -> int:
        assert self._proc is not None
        return self._proc.wait()

    def result(self, code: int) -> Result:
        """The step's result from srun's exit ``code``, its first failure named."""
        duration = time.monotonic() - self._began
        result = Result(exit_code=0 if code == 0 else 1, srun_exit_code=code, duration=duration)
        if code != 0 and not self._cancelled:
            result.failure = self.diagnose(code)
        return result

    def diagnose(self, srun_code: int) -> Failure:
        """Name the first failure: a node entrypoint's error, a rank's, or srun's report."""
        plan = self.plan
        if self._node_errors:
            # the master's message names who never arrived; prefer it over the others'
            task, message = min(self._node_errors, key=lambda item: item[0])
            node = plan.node_of_rank(task) if plan.mode is LaunchMode.SRUN else task
            return Failure(said=f"{message} [reported by node {node} ({plan.host_of(node)})]")
        lost = self._lost_node()
        if lost is not None:
            return lost
        records = {r.rank: r for r in failures.read_all(self.logs)}
        cause = self._first_failure(list(records.values()))
        if cause is not None and cause.rank is not None and not cause.consequence:
            rank, node = cause.rank, plan.node_of_rank(cause.rank)
            record = records.get(rank)
            error = record.error if record else cause.error
            code = record.exit_code if record else cause.exit_code
            return Failure(
                node_rank=node,
                rank=rank,
                local_rank=rank % plan.nproc_per_node,
                host=plan.host_of(node),
                error=error or None,
                first=bool(error),
                exit_code=1 if code is None and not error else code,
                log=f"rank{rank}.log",
            )
        # torchrun's worker events by the same rule; a rank that only lost its peer is not
        # the cause (srun's report of the task then says more)
        peers_lost = {rank for rank, record in records.items() if record.secondary}
        exits = [c for c in seen_exits(self.router.worker_exits) if c.rank not in peers_lost]
        if (ended := failures.first_failure(exits)) is not None and ended.rank is not None:
            return Failure(
                node_rank=ended.node_rank,
                rank=ended.rank,
                local_rank=ended.rank % plan.nproc_per_node,
                host=plan.host_of(ended.node_rank),
                exit_code=ended.exit_code,
            )
        if self._srun_errors:
            host, tasks, text = self._srun_errors[0]
            what = "rank" if plan.mode is LaunchMode.SRUN else "node"
            first = int(tasks.split(",")[0].split("-")[0])
            found = _SRUN_EXIT.search(text)
            return Failure(
                said=f"{what} {first} on {host} failed: {text}",
                rank=first if plan.mode is LaunchMode.SRUN else None,
                log=f"rank{first}.log" if plan.mode is LaunchMode.SRUN else "srun.log",
                exit_code=int(found.group(1)) if found and plan.mode is LaunchMode.SRUN else None,
            )
        return Failure(said=f"srun ended with exit code {srun_code}", log="srun.log")

    def _lost_node(self) -> Failure | None:
        """A node that vanished under the step (crashed, or its slurmd and slurmstepd killed):
        Slurm said so, or its tasks still ran when srun gave up waiting for them to end. The
        other nodes' ranks then only failed after it (a peer gone), so it is the cause."""
        plan = self.plan
        if self._failed_nodes:
            host = self._failed_nodes[0]
            nodes = [n for n in range(plan.nnodes) if plan.host_of(n) == host]
            node, why = (nodes[0] if nodes else None), "Slurm reported a node failure"
        elif self._srun_gave_up and self._still_running:
            task = min(self._still_running)
            node = plan.node_of_rank(task) if plan.mode is LaunchMode.SRUN else task
            host = plan.host_of(node)
            why = "its tasks never ended after srun stopped the step (srun: " + _SRUN_GAVE_UP + ")"
        else:
            return None
        where = f"node {node} on {host}" if node is not None else host
        return Failure(
            node_rank=node,
            host=host,
            said=f"{where} was lost: {why}; the other nodes' ranks failed after it "
            f"(`sinfo -n {host}` shows the node; a script given --resume auto continues from "
            "its last checkpoint when run again)",
            log="srun.log",
        )

    def _first_failure(self, records: list[failures.ErrorRecord]) -> failures.Candidate | None:
        """failures.first_failure over the ranks' error records, torchrun's worker events,
        srun's task reports (srun mode) and the exception lines the ranks printed."""
        plan, last_error = self.plan, self.router.last_error
        reported = []
        if plan.mode is LaunchMode.SRUN:
            for _, tasks, text in self._srun_errors:
                reported += [
                    failures.Candidate(
                        plan.node_of_rank(rank),
                        rank,
                        exit_code=failures.srun_exit_code(text),
                    )
                    for rank in sorted(_task_ids(tasks))
                ]
        seen = [*seen_exits(self.router.worker_exits), *reported]
        first, _ = failures.first_cause(records, seen, last_error, plan.node_of_rank)
        return first


def spawn(
    argv: list[str], env: dict[str, str], preexec: Callable[[], None] | None = None
) -> subprocess.Popen[str]:
    """A process whose output (text, both streams) is read line by line; no stdin."""
    return subprocess.Popen(
        argv,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        errors="replace",
        preexec_fn=preexec,
    )


def _task_ids(text: str) -> set[int]:
    """srun's task list ``0,2-3`` -> {0, 2, 3}."""
    ids: set[int] = set()
    for part in text.split(","):
        first, _, last = part.partition("-")
        if first.isdigit():
            ids.update(range(int(first), int(last or first) + 1))
    return ids


class StepBackend:
    """The ranks of a SLURM allocation: one srun step over its nodes, or, for one node in
    torchrun mode run from that node, torchrun directly (as ``noderun run`` locally)."""

    def __init__(
        self,
        step: StepPlan,
        job_id: str,
        command: list[str],
        direct: bool | None = None,  # default the plan's
        show: Callable[[int], bool] | None = None,
        restart_count: int = 0,
        known_as: str | None = None,
    ) -> None:
        self.step = step
        self.job_id = job_id
        self.known_as = known_as or job_id  # `<array>_<task>` for an array task (run.json's)
        self.what = f"job {self.known_as}"  # as the banner names it
        self.command = command
        self.direct = step.direct if direct is None else direct  # torchrun here, no srun
        self.show = show
        self.restart_count = restart_count  # SLURM's: how often the job was requeued
        self.gang: StepSupervisor | LocalSupervisor | None = None  # once started

    @property
    def run_dir(self) -> Path:
        return self.step.run_dir

    @property
    def master_port(self) -> int:
        return self.step.master_port or port_for_job(self.job_id)

    def banner(self) -> str:
        step = self.step
        return (
            f"noderun: SLURM {self.what}: {step.nnodes} node(s) x {step.nproc_per_node} = "
            f"{step.world_size} ranks ({step.mode.value} mode) on {', '.join(step.hosts)}; "
            f"run dir {step.run_dir}"
        )

    def describe(self) -> RunRecord:
        """This attempt, on top of what `noderun submit` (or a requeued job's earlier start)
        recorded there; how an earlier attempt ended is not this one's."""
        step = self.step
        record = rundir.read_record(step.run_dir) or RunRecord(backend="slurm")
        return dataclasses.replace(
            record.unended(),
            command=self.command,
            backend="slurm",
            mode=step.mode.value,
            job_id=self.known_as,
            restart_count=self.restart_count,
            script=step.script,
            script_args=list(step.script_args),
            entry=step.entry.value,
            topology=RunShape(
                nnodes=step.nnodes,
                nproc_per_node=step.nproc_per_node,
                world_size=step.world_size,
                master_addr=step.hosts[0],
                master_port=self.master_port,
            ),
            hosts=list(step.hosts),
            launch="torchrun" if self.direct else "srun",
            step_command=None if self.direct else step.srun_argv(),
            cwd=os.getcwd(),
            status="running",
            start_time=rundir.now_iso(),
        )

    def hosts(self) -> list[str]:
        return [self.step.host_of(node) for node in range(self.step.nnodes)]

    def ranks(self) -> list[RankPlace]:
        return rank_places(self.hosts(), self.step.nproc_per_node)

    def log_files(self) -> list[Path]:
        step = self.step
        names = [f"rank{rank}.log" for rank in range(step.world_size)]
        agents = step.nnodes if step.mode is LaunchMode.TORCHRUN else 0
        names += ["node0.agent.log"] if self.direct else ["srun.log"]
        names += [f"node{node}.agent.log" for node in range(agents) if not self.direct]
        return [step.run_dir / "logs" / name for name in names]

    def roots(self) -> list[int]:
        return self.gang.roots() if self.gang else []

    def srun_job(self) -> str | None:
        return None if self.direct else self.job_id

    def cancel(self) -> None:
        if self.gang is not None:
            self.gang.cancel()

    def start(self, on_output: Callable[[], None] | None = None) -> None:
        step = self.step
        (step.run_dir / "logs").mkdir(parents=True, exist_ok=True)
        for rank in range(step.world_size):  # one log per rank, even for a rank that is silent
            (step.run_dir / "logs" / f"rank{rank}.log").touch()
        if not self.direct:
            self.gang = self.supervisor()
        else:
            plan = plan_local(self.direct_gang(), dict(step.env))
            self.gang = LocalSupervisor(plan, show=self.show)
        self.gang.start(on_output)

    def direct_gang(self) -> Gang:
        """The one node's torchrun of a direct run: the step's python and agent options too."""
        step = self.step
        return Gang(
            nnodes=1,
            nproc_per_node=step.nproc_per_node,
            master_addr="127.0.0.1",
            master_port=require_free_port(self.master_port),
            run_dir=step.run_dir,
            script=step.script,
            script_args=step.script_args,
            run_id=step.run_id or self.job_id,
            python=step.python,
            entry=step.entry,
            agent_flags=step.agent_flags,
        )

    def supervisor(self) -> StepSupervisor:
        return StepSupervisor(self.step, show=self.show)

    def wait(self, on_end: Callable[[], None] | None = None) -> Result:
        assert self.gang is not None
        return self.gang.wait(on_end)

    def record(self, record: RunRecord, result: Result) -> None:
        if not self.direct:
            record.srun_exit_code = result.srun_exit_code
