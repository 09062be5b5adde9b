"""Run a StepPlan's srun step inside an allocation: per-rank logs, ``node:rank`` console
prefixes, and the first failure named by rank and host."""

from __future__ import annotations

import contextlib
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
from typing import IO

from noderun import failures, proc_guard, timeline
from noderun.backends.stall import StallWatcher
from noderun.exit_codes import EXIT_STALLED
from noderun.outcome import Outcome
from noderun.plan.slurm import LaunchMode, StepPlan
from noderun.plan.stall import StallPolicy
from noderun.topology.contract import job_token

_LABEL = re.compile(r"^\s*(\d+): ?(.*)$", re.DOTALL)  # srun --label
_WORKER = re.compile(r"^\[default(\d+)\]:(.*)$", re.DOTALL)  # torchrun --tee
_ROOT_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)\s*\(local_rank:\s*(\d+)\)")
_ROOT_EXIT = re.compile(r"^\s*exitcode\s*:\s*(-?\d+)")
_SRUN_TASK = re.compile(r"srun: error: (\S+): tasks? ([\d,\-]+): (.*)")
_SRUN_EXIT = re.compile(r"Exited with exit code (\d+)")
_NODE_ERROR = "noderun.node: error: "
FORWARDED = (signal.SIGUSR1, signal.SIGUSR2)


@dataclasses.dataclass
class StepFailure:
    """What went wrong first, as precisely as the output allows."""

    summary: str  # one line, names rank and host when known
    rank: int | None = None
    log: str | None = None
    exit_code: int | None = None  # the failing rank's own exit code, when known


@dataclasses.dataclass
class StepResult:
    exit_code: int
    srun_exit_code: int | None
    duration: float
    failure: StepFailure | None = None
    interrupted_by: str | None = None

    def outcome(self, run_dir: Path) -> Outcome:
        """This result as the one outcome every backend returns."""
        failure = self.failure
        stalled = failure.summary if failure and self.exit_code == EXIT_STALLED else None
        if stalled:
            failure = None
        return Outcome(
            duration=self.duration,
            failure=failure.summary if failure else None,
            failure_exit=failure.exit_code if failure else None,
            failure_rank=failure.rank if failure else None,
            log=run_dir / "logs" / failure.log if failure and failure.log else None,
            interrupted_by=self.interrupted_by,
            interrupt_code=self.exit_code if self.interrupted_by else None,
            stalled=stalled,
        )


def _signal_text(code: int) -> str:
    with contextlib.suppress(ValueError):
        return f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
    return f"killed by signal {-code}"


class StepSupervisor:
    """Start ``srun`` for ``plan`` and route its labelled output to one log per rank."""

    def __init__(
        self,
        plan: StepPlan,
        console: IO[str] | None = None,
        stall: StallPolicy | None = None,
        job_id: str | None = None,
        show: Callable[[int], bool] | None = None,
    ) -> None:
        self.plan = plan
        self.show = show or (lambda _local_rank: True)  # torchrun's --local-ranks-filter
        self.console = console or sys.stdout
        self.logs = plan.run_dir / "logs"
        self._lock = threading.Lock()
        self._files: dict[str, IO[str]] = {}
        self._node_errors: list[tuple[int, str]] = []  # (node or rank task, message)
        self._root: dict[int, dict[str, int]] = {}  # node -> torchrun root cause
        self._summaries: dict[int, failures.ElasticSummary] = {}  # node -> every failed rank
        self._last_error: dict[int, str] = {}  # rank -> the last exception line it printed
        self._in_root: set[int] = set()
        self._srun_errors: list[tuple[str, str, str]] = []  # (host, tasks, text)
        self._exit_codes: dict[int, int] = {}  # rank -> exit code its error record gives
        self._proc: subprocess.Popen[str] | None = None
        self._stop_signal: int | None = None
        self.stall = (
            StallWatcher(
                stall, plan.run_dir, plan.world_size, job_id, plan.hosts, on_kill=self._stop_step
            )
            if stall and stall.enabled and job_id
            else None
        )

    def _stop_step(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGTERM)  # srun forwards it and ends the step

    def _file(self, name: str) -> IO[str]:
        if name not in self._files:
            self._files[name] = open(self.logs / name, "a", buffering=1)  # noqa: SIM115
        return self._files[name]

    def _write(self, console_line: str | None, log: str, text: str) -> None:
        with self._lock:
            if console_line is not None:
                self.console.write(console_line + "\n")
                self.console.flush()
            self._file(log).write(text + "\n")

    def feed(self, raw: str) -> None:
        """One line of srun output: ``T: text`` (task T) or srun's own message."""
        line = raw.rstrip("\n")
        match = _LABEL.match(line)
        if not match:
            self._write(line, "srun.log", line)
            if m := _SRUN_TASK.search(line):
                self._srun_errors.append((m.group(1), m.group(2), m.group(3).strip()))
            return
        task, text = int(match.group(1)), match.group(2)
        if self.plan.mode is LaunchMode.SRUN:
            node = self.plan.node_of_rank(task)
            self._rank_line(node, task, text)
            if text.startswith(_NODE_ERROR):
                self._node_errors.append((task, text.removeprefix(_NODE_ERROR)))
            return
        worker = _WORKER.match(text)
        if worker:
            local = int(worker.group(1))
            self._rank_line(task, task * self.plan.nproc_per_node + local, worker.group(2))
            return
        self._agent_line(task, text)

    def _rank_line(self, node: int, rank: int, text: str) -> None:
        if error := failures.exception_line(text):
            self._last_error[rank] = error
        shown = self.show(rank % self.plan.nproc_per_node)
        self._write(f"{node}:{rank}| {text}" if shown else None, f"rank{rank}.log", text)
        if self.stall:
            self.stall.saw_output()

    def _agent_line(self, node: int, text: str) -> None:
        if text.startswith(_NODE_ERROR):
            self._node_errors.append((node, text.removeprefix(_NODE_ERROR)))
            self._write(f"{node}:-| {text}", f"node{node}.agent.log", text)
        else:
            with self._lock:
                self._file(f"node{node}.agent.log").write(text + "\n")
        self._summaries.setdefault(node, failures.ElasticSummary()).feed(text)
        if "Root Cause" in text:
            self._in_root.add(node)
        elif node in self._in_root:
            root = self._root.setdefault(node, {})
            if m := _ROOT_RANK.match(text):
                root["rank"], root["local_rank"] = int(m.group(1)), int(m.group(2))
            elif m := _ROOT_EXIT.match(text):
                root["exit_code"] = int(m.group(1))
                self._in_root.discard(node)

    def _pump(self, stream: IO[str]) -> None:
        for line in iter(stream.readline, ""):
            self.feed(line)
        stream.close()

    def _on_signal(self, signum: int, _frame: object) -> None:
        self._stop_signal = signum
        self._stop_step()

    def _forward(self, signum: int, _frame: object) -> None:
        """sbatch --signal=B:USR1@T lands here: pass it on (srun forwards it to every task)."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signum)

    def run(self) -> StepResult:
        self.logs.mkdir(parents=True, exist_ok=True)
        handlers = {s: signal.signal(s, self._on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        handlers.update({s: signal.signal(s, self._forward) for s in FORWARDED})
        start = time.monotonic()
        threads: list[threading.Thread] = []
        try:
            self._proc = subprocess.Popen(
                self.plan.srun_argv(),
                env={**os.environ, **dict(self.plan.env), **job_token(os.environ)},
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                stdin=subprocess.DEVNULL,
                text=True,
                errors="replace",
                # srun's SIGTERM ends the step; SIGKILLed, it would leave the step running
                preexec_fn=proc_guard.die_with_parent_hook(signal.SIGTERM),
            )
            timeline.stamp(self.plan.run_dir, "step_started", "launcher")
            for stream in (self._proc.stdout, self._proc.stderr):
                assert stream is not None
                thread = threading.Thread(target=self._pump, args=(stream,), daemon=True)
                thread.start()
                threads.append(thread)
            if self.stall:
                self.stall.start()
            code = self._proc.wait()
            timeline.stamp(self.plan.run_dir, "step_ended", "launcher")
        finally:
            if self.stall:
                self.stall.stop()
            for thread in threads:
                thread.join(timeout=10)
            for s, handler in handlers.items():
                signal.signal(s, handler)
            with self._lock:
                for handle in self._files.values():
                    handle.close()
                self._files.clear()
        result = StepResult(
            exit_code=0 if code == 0 else 1, srun_exit_code=code, duration=time.monotonic() - start
        )
        if self._stop_signal is not None:
            result.interrupted_by = signal.Signals(self._stop_signal).name
            result.exit_code = 128 + self._stop_signal
        elif self.stall and self.stall.killed:
            result.exit_code = EXIT_STALLED
            result.failure = StepFailure(
                f"stopped after a stall (exit {EXIT_STALLED}): {self.stall.report}"
            )
        elif code != 0:
            result.failure = self.diagnose(code)
        return result

    def diagnose(self, srun_code: int) -> StepFailure:
        """Name the first failure: a node entrypoint's error, a rank's, or srun's report."""
        plan = self.plan
        if self._node_errors:
            # the master's message names who never arrived; prefer it over the others'
            task, message = min(self._node_errors, key=lambda item: item[0])
            node = plan.node_of_rank(task) if plan.mode is LaunchMode.SRUN else task
            return StepFailure(f"{message} [reported by node {node} ({plan.host_of(node)})]")
        records = self._error_records()
        cause = self._first_failure()
        if cause is not None and cause.rank is not None and not cause.consequence:
            rank, node = cause.rank, plan.node_of_rank(cause.rank)
            error = records[rank][2] if rank in records else cause.error
            how = (
                f"failed first: {error}"
                if error
                else f"failed: {_signal_text(cause.exit_code or 1)}"
            )
            return StepFailure(
                f"rank {rank} (node {node} on {plan.host_of(node)}, local rank "
                f"{rank % plan.nproc_per_node}) {how}",
                rank=rank,
                log=f"rank{rank}.log",
                exit_code=self._exit_codes.get(rank, cause.exit_code),
            )
        primary = [r for r in records.values() if not failures.is_secondary(r[2])]
        if primary:
            _, rank, error = min(primary)
            node = plan.node_of_rank(rank)
            return StepFailure(
                f"rank {rank} (node {node} on {plan.host_of(node)}, local rank "
                f"{rank % plan.nproc_per_node}) failed first: {error}",
                rank=rank,
                log=f"rank{rank}.log",
                exit_code=self._exit_codes.get(rank, self._srun_exit_of(rank)),
            )
        # torchrun's root causes; a rank that only lost its peer is not the cause
        causes = [
            (root.get("exit_code", 1) >= 0, node, root)
            for node, root in sorted(self._root.items())
            if "rank" in root
            and not failures.is_secondary(records.get(root["rank"], (0, 0, ""))[2])
        ]
        if causes:
            _, node, root = min(causes, key=lambda c: (c[0], c[1]))
            rank = root["rank"]
            return StepFailure(
                f"rank {rank} (node {node} on {plan.host_of(node)}, local rank "
                f"{root['local_rank']}) failed: {_signal_text(root.get('exit_code', 1))}",
                rank=rank,
                log=f"rank{rank}.log",
                exit_code=root.get("exit_code"),
            )
        if self._srun_errors:
            host, tasks, text = self._srun_errors[0]
            what = "rank" if plan.mode is LaunchMode.SRUN else "node"
            first = int(tasks.split(",")[0].split("-")[0])
            code = _SRUN_EXIT.search(text)
            return StepFailure(
                f"{what} {first} on {host} failed: {text}",
                rank=first if plan.mode is LaunchMode.SRUN else None,
                log=f"rank{first}.log" if plan.mode is LaunchMode.SRUN else "srun.log",
                exit_code=int(code.group(1)) if code and plan.mode is LaunchMode.SRUN else None,
            )
        return StepFailure(f"srun ended with exit code {srun_code}", log="srun.log")

    def _first_failure(self) -> failures.Candidate | None:
        """failures.first_failure over the ranks' error records, torchrun's summaries, srun's
        task reports (srun mode) and the exception lines the ranks printed."""
        plan = self.plan
        per_rank = {c.rank: c for c in failures.candidates_of(failures.read_all(self.logs))}
        for node, summary in self._summaries.items():
            for c in summary.candidates(node, self._last_error):
                per_rank.setdefault(c.rank, c)
        if plan.mode is LaunchMode.SRUN:
            for _, tasks, text in self._srun_errors:
                for rank in sorted(_task_ids(tasks)):
                    per_rank.setdefault(
                        rank,
                        failures.Candidate(
                            plan.node_of_rank(rank),
                            rank,
                            exit_code=failures.srun_exit_code(text),
                            error=self._last_error.get(rank, ""),
                        ),
                    )
        for rank, error in self._last_error.items():
            per_rank.setdefault(
                rank, failures.Candidate(plan.node_of_rank(rank), rank, error=error)
            )
        return failures.first_failure(per_rank.values())

    def _error_records(self) -> dict[int, tuple[float, int, str]]:
        """Uncaught exceptions recorded by noderun.init() ranks: rank -> (time, rank, error)."""
        records = failures.read_all(self.logs)
        self._exit_codes = {r.rank: r.exit_code for r in records}
        return {r.rank: (r.time, r.rank, r.error) for r in records}

    def _srun_exit_of(self, rank: int) -> int | None:
        """srun mode: the exit code srun reported for ``rank``'s task, if it did."""
        if self.plan.mode is not LaunchMode.SRUN:
            return None
        for _, tasks, text in self._srun_errors:
            code = _SRUN_EXIT.search(text)
            if code and rank in _task_ids(tasks):
                return int(code.group(1))
        return None


def _task_ids(text: str) -> set[int]:
    """srun's task list ``0,2-3`` -> {0, 2, 3}."""
    ids: set[int] = set()
    for part in text.split(","):
        first, _, last = part.partition("-")
        if first.isdigit():
            ids.update(range(int(first), int(last or first) + 1))
    return ids
