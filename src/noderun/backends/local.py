"""Run a LaunchPlan's agents on this machine and supervise them as one gang."""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import itertools
import json
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

import psutil

from noderun import failures, proc_guard, timeline
from noderun.backends.stall import StallWatcher
from noderun.errors import os_error_line
from noderun.exit_codes import EXIT_STALLED
from noderun.outcome import Outcome
from noderun.plan import LaunchPlan, NodeCommand
from noderun.plan.stall import StallPolicy

_PREFIX = re.compile(r"^\[default(\d+)\]:(.*)$", re.DOTALL)
_ROOT_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)\s*\(local_rank:\s*(\d+)\)")
_ROOT_EXIT = re.compile(r"^\s*exitcode\s*:\s*(-?\d+)")
_EXCEPTION = re.compile(
    r"^(?:\[rank\d+\]:\s*)?([A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit|Timeout)\b.*)$"
)
PR_SET_CHILD_SUBREAPER = 36
# how long other nodes may take to report once the first failure seen is only secondary
SECONDARY_GRACE_SEC = 5.0
SSH_FAILED = 255  # ssh's own exit status: the connection, not the command, failed


@dataclasses.dataclass
class RankFailure:
    """The first failure seen: which rank on which node, and why."""

    node_rank: int
    rank: int | None = None
    local_rank: int | None = None
    exit_code: int | None = None
    error: str | None = None
    host: str | None = None  # a remote node's host (SSH)

    def reason(self) -> str:
        if self.exit_code is not None and self.exit_code < 0:
            try:
                name = signal.Signals(-self.exit_code).name
            except ValueError:
                name = f"signal {-self.exit_code}"
            text = f"killed by {name}"
        elif self.exit_code is not None:
            text = f"exit code {self.exit_code}"
        else:
            text = "agent failed"
        return f"{text}: {self.error}" if self.error else text

    def describe(self) -> str:
        where = f"node {self.node_rank}" + (f" on {self.host}" if self.host else "")
        if self.rank is None:
            return f"{where} failed ({self.reason()})"
        return f"rank {self.rank} ({where}, local rank {self.local_rank}) failed: {self.reason()}"


@dataclasses.dataclass
class RunResult:
    exit_code: int
    node_exit_codes: dict[int, int | None]
    failure: RankFailure | None = None
    interrupted_by: str | None = None
    duration: float = 0.0
    stalled: str | None = None  # the stall verdict and report, when it stopped the job

    def outcome(self, run_dir: Path) -> Outcome:
        """This result as the one outcome every backend returns."""
        failure = self.failure
        log = None
        if failure is not None:
            name = f"rank{failure.rank}.log" if failure.rank is not None else None
            log = run_dir / "logs" / (name or f"node{failure.node_rank}.agent.log")
        return Outcome(
            duration=self.duration,
            failure=failure.describe() if failure and not self.stalled else None,
            failure_exit=failure.exit_code if failure else None,
            failure_rank=failure.rank if failure else None,
            log=log,
            interrupted_by=self.interrupted_by,
            interrupt_code=self.exit_code if self.interrupted_by else None,
            stalled=self.stalled,
        )


class _NodeOutput:
    """Splits one agent's output into per-rank lines: console prefix + per-rank log file."""

    def __init__(self, supervisor: LocalSupervisor, node_rank: int) -> None:
        self.sup = supervisor
        self.node = node_rank
        self.in_root_cause = False
        self.root: dict[str, int] = {}
        self.summary = failures.ElasticSummary()  # every failed rank torchrun lists
        self.told: dict[tuple[int, str], int] = {}  # (local rank, stream) -> lines the tee gave

    def feed(self, raw: str, stream: str) -> None:
        line = raw.rstrip("\n")
        match = _PREFIX.match(line)
        if match:
            local = int(match.group(1))
            self.told[(local, stream)] = self.told.get((local, stream), 0) + 1
            self.rank_line(local, match.group(2))
            return
        self.sup.agent_line(self.node, line)
        self.summary.feed(line)
        if "Root Cause" in line:
            self.in_root_cause = True
        elif self.in_root_cause:
            if m := _ROOT_RANK.match(line):
                self.root["rank"], self.root["local_rank"] = int(m.group(1)), int(m.group(2))
            elif m := _ROOT_EXIT.match(line):
                self.root["exit_code"] = int(m.group(1))
                self.in_root_cause = False

    def rank_line(self, local: int, text: str) -> None:
        rank = self.node * self.sup.plan.nproc_per_node + local
        shown = self.sup.show(local)
        prefix = self.sup.node(self.node).prefix
        self.sup.emit(rank, f"{prefix}:{rank}| {text}" if shown else None, text)

    def catch_up(self, files: list[tuple[int, str, Path]]) -> None:
        """Lines torchrun's tee never passed on: its tail thread can stop before it read a
        rank's last lines (pytorch/pytorch#143823); torchelastic's per-rank files hold all."""
        for local, stream, path in files:
            for text in untold_lines(path, self.told.get((local, stream), 0)):
                self.rank_line(local, text)


def untold_lines(path: Path, told: int) -> list[str]:
    """The lines of a torchelastic rank file after the first ``told``, read as torch's tail
    reads them (universal newlines, bad bytes replaced)."""
    try:
        with open(path, errors="replace") as f:  # only the untold end is kept in memory
            return [line.rstrip("\n") for line in itertools.islice(f, told, None)]
    except OSError:
        return []


def elastic_files(root: Path, skip: set[str]) -> list[tuple[int, str, Path]]:
    """(local rank, stream, path) of torchelastic's rank files under ``root``
    (``<run id>_<random>/attempt_N/<local rank>/std{out,err}.log``), but for folders in ``skip``
    (an earlier attempt's)."""
    return [
        (int(path.parent.name), stream, path)
        for stream in ("stdout", "stderr")
        for path in sorted(root.glob(f"*/attempt_*/*/{stream}.log"))
        if path.parents[2].name not in skip and path.parent.name.isdigit()
    ]


class LocalSupervisor:
    """Start every agent in its own session, stream output, and tear the gang down together."""

    def __init__(
        self,
        plan: LaunchPlan,
        console: IO[str] | None = None,
        grace: float = 3.0,
        on_start: Callable[[list[int]], None] | None = None,
        stall: StallPolicy | None = None,
        show: Callable[[int], bool] | None = None,
    ) -> None:
        self.plan = plan
        self.show = show or (lambda _local_rank: True)  # torchrun's --local-ranks-filter
        self.console = console or sys.stdout
        self.grace = grace
        self.on_start = on_start
        self.logs = plan.run_dir / "logs"
        self._lock = threading.Lock()
        self._files: dict[str, IO[str]] = {}
        self._unwritable: set[str] = set()
        self._last_error: dict[int, str] = {}
        self._last_agent_line: dict[int, str] = {}
        self._stop_signal: int | None = None
        self.stall = (
            StallWatcher(stall, plan.run_dir, plan.world_size) if stall and stall.enabled else None
        )

    def node(self, node_rank: int) -> NodeCommand:
        """The plan's node of that rank (a hand-started node's plan holds only its own)."""
        return next(n for n in self.plan.nodes if n.node_rank == node_rank)

    def emit(self, rank: int, console_line: str | None, text: str) -> None:
        """One rank's line: to the console with its ``node:rank`` prefix (None: filtered out),
        whole to its log."""
        with self._lock:
            if console_line is not None:
                self.console.write(console_line + "\n")
                self.console.flush()
            self._log(f"rank{rank}.log", text)
            if m := _EXCEPTION.match(text.strip()):
                self._last_error[rank] = m.group(1)[:300]
        if self.stall:
            self.stall.saw_output()

    def agent_line(self, node: int, line: str) -> None:
        with self._lock:
            self._log(f"node{node}.agent.log", line)
            if line.strip():
                self._last_agent_line[node] = line.strip()[:300]

    def _log(self, name: str, line: str) -> None:
        """A line to a log file; a failed write (a full disk) is said once per file and the
        output keeps flowing (a reader that stopped would stall the ranks on a full pipe)."""
        try:
            self._file(name).write(line + "\n")
        except OSError as err:
            if name not in self._unwritable:
                self._unwritable.add(name)
                self.console.write(f"noderun: warning: {os_error_line(err)} ({name})\n")
                self.console.flush()

    def _file(self, name: str) -> IO[str]:
        if name not in self._files:
            self._files[name] = open(self.logs / name, "a", buffering=1)  # noqa: SIM115
        return self._files[name]

    def _pump(self, stream: IO[str], sink: _NodeOutput, name: str) -> None:
        for line in iter(stream.readline, ""):
            sink.feed(line, name)
        stream.close()

    def _elastic_root(self, node_rank: int) -> Path:
        return self.logs / "torchelastic" / f"node{node_rank}"

    def _catch_up(
        self,
        sinks: dict[int, _NodeOutput],
        threads: dict[int, list[threading.Thread]],
        before: dict[int, set[str]],
    ) -> None:
        """Every node whose output was read to its end: the rank lines its tee dropped."""
        for node_rank, sink in sinks.items():
            if any(t.is_alive() for t in threads[node_rank]):
                continue  # still being read: counting now would repeat lines
            sink.catch_up(elastic_files(self._elastic_root(node_rank), before[node_rank]))

    def _on_signal(self, signum: int, _frame: object) -> None:
        self._stop_signal = signum

    def run(self) -> RunResult:
        self.logs.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(OSError, AttributeError):
            # orphaned workers (their agent killed) come back to us, so none escapes teardown
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        previous = {s: signal.signal(s, self._on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        start = time.monotonic()
        procs: dict[int, subprocess.Popen[str]] = {}
        sinks: dict[int, _NodeOutput] = {}
        threads: dict[int, list[threading.Thread]] = {}
        failed_nodes: list[int] = []
        before = {  # an earlier attempt's torchelastic folders, not read again
            node.node_rank: {p.name for p in self._elastic_root(node.node_rank).glob("*")}
            for node in self.plan.nodes
        }
        try:
            for node in self.plan.nodes:
                proc = subprocess.Popen(
                    node.argv,
                    env={**os.environ, **node.env},
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    # over SSH the far end's guard ends the node when this pipe closes
                    stdin=subprocess.PIPE if node.remote else subprocess.DEVNULL,
                    text=True,
                    start_new_session=True,
                    preexec_fn=proc_guard.die_with_parent_hook(),  # SIGKILLed with noderun
                )
                procs[node.node_rank] = proc
                if node.stdin_env and proc.stdin is not None:  # the far end's guard reads it
                    with contextlib.suppress(OSError):
                        proc.stdin.write(json.dumps(dict(node.stdin_env)) + "\n")
                        proc.stdin.flush()
                sinks[node.node_rank] = _NodeOutput(self, node.node_rank)
                threads[node.node_rank] = []
                for name, stream in (("stdout", proc.stdout), ("stderr", proc.stderr)):
                    assert stream is not None
                    thread = threading.Thread(
                        target=self._pump, args=(stream, sinks[node.node_rank], name), daemon=True
                    )
                    thread.start()
                    threads[node.node_rank].append(thread)
            timeline.stamp(self.plan.run_dir, "step_started", "launcher")
            if self.on_start:
                self.on_start([p.pid for p in procs.values()])
            if self.stall:
                self.stall.start(roots=[p.pid for p in procs.values()])
            failed_node = self._watch(procs)
            failed_nodes = self._settle(procs, failed_node)
            timeline.stamp(self.plan.run_dir, "step_ended", "launcher")
        finally:
            if self.stall:
                self.stall.stop()
            self._teardown(procs)
            for node_threads in threads.values():
                for thread in node_threads:
                    thread.join(timeout=5)
            self._catch_up(sinks, threads, before)
            for s, handler in previous.items():
                signal.signal(s, handler)
            with self._lock:
                for handle in self._files.values():
                    with contextlib.suppress(OSError):
                        handle.close()
                self._files.clear()
        codes = {n: p.returncode for n, p in procs.items()}
        result = RunResult(exit_code=0, node_exit_codes=codes, duration=time.monotonic() - start)
        if self._stop_signal is not None:
            result.interrupted_by = signal.Signals(self._stop_signal).name
            result.exit_code = 128 + self._stop_signal
        elif self.stall and self.stall.killed:
            result.exit_code, result.stalled = EXIT_STALLED, self.stall.report
        elif failed_node is not None:
            failed_node = self._root_node(failed_nodes, sinks)
            root = sinks[failed_node].root
            failure = RankFailure(
                node_rank=failed_node,
                rank=root.get("rank"),
                local_rank=root.get("local_rank"),
                exit_code=root.get("exit_code", codes[failed_node]),
            )
            failure = self._first_failure(failure, sinks)
            if failure.rank is not None and failure.error is None:
                failure.error = self._last_error.get(failure.rank)
            node = self.node(failure.node_rank)
            if node.remote:
                failure.host = node.host
                if failure.rank is None and codes[failure.node_rank] == SSH_FAILED:
                    failure.error = failure.error or self._last_agent_line.get(node.node_rank)
            result.failure = failure
            result.exit_code = 1
        return result

    def _settle(self, procs: dict[int, subprocess.Popen[str]], failed: int | None) -> list[int]:
        """The nodes that failed on their own, in the order seen, starting with ``failed``.

        A node whose ranks only lost their connection to a peer (a secondary error) is
        seldom the cause: the peer's node may have died a moment earlier and its agent not
        yet exited. Give the other nodes a short grace to report before tearing down.
        """
        if failed is None:
            return []
        seen = [failed]
        records = failures.read_all(self.logs)
        if failures.first_primary(records) is not None or not any(
            r.node_rank == failed and r.secondary for r in records
        ):
            return seen
        deadline = time.monotonic() + SECONDARY_GRACE_SEC
        while time.monotonic() < deadline and self._stop_signal is None:
            for node, proc in procs.items():
                if node not in seen and proc.poll() not in (None, 0):
                    seen.append(node)
            if all(p.poll() is not None for p in procs.values()):
                break
            time.sleep(0.05)
        return seen

    def _root_node(self, failed: list[int], sinks: dict[int, _NodeOutput]) -> int:
        """The first failed node whose root-cause rank did not just lose a peer."""
        secondary = {r.rank for r in failures.read_all(self.logs) if r.secondary}
        for node in failed:
            if sinks[node].root.get("rank") not in secondary:
                return node
        return failed[0]

    def _first_failure(self, observed: RankFailure, sinks: dict[int, _NodeOutput]) -> RankFailure:
        """The rank that failed first for its own reason (failures.first_failure), from the
        ranks' error records, torchrun's summaries and the ranks' own error lines."""
        records = failures.read_all(self.logs)
        per_rank = {c.rank: c for c in failures.candidates_of(records)}
        for node, sink in sinks.items():
            for c in sink.summary.candidates(node, self._last_error):
                per_rank.setdefault(c.rank, c)
        nproc = self.plan.nproc_per_node
        for rank, error in self._last_error.items():
            per_rank.setdefault(rank, failures.Candidate(rank // nproc, rank, error=error))
        if observed.rank is not None:
            per_rank.setdefault(
                observed.rank,
                failures.Candidate(
                    observed.node_rank,
                    observed.rank,
                    exit_code=observed.exit_code,
                    error=self._last_error.get(observed.rank, ""),
                ),
            )
        first = failures.first_failure(per_rank.values())
        if first is None or first.rank is None or first.consequence:
            return observed
        record = next((r for r in records if r.rank == first.rank), None)
        return RankFailure(
            node_rank=first.node_rank,
            rank=first.rank,
            local_rank=first.rank % nproc,
            exit_code=1 if first.exit_code is None else first.exit_code,  # it raised
            error=record.error if record else None,
        )

    def _watch(self, procs: dict[int, subprocess.Popen[str]]) -> int | None:
        """Wait until all agents succeed (None), one fails (its node), or a signal arrives."""
        while self._stop_signal is None and not (self.stall and self.stall.killed):
            done = {n: p.poll() for n, p in procs.items()}
            for node, code in done.items():
                if code not in (None, 0):
                    return node
            if all(code == 0 for code in done.values()):
                return None
            time.sleep(0.05)
        return None

    def _teardown(self, procs: dict[int, subprocess.Popen[str]]) -> None:
        """SIGTERM every agent and worker, SIGKILL what is left after the grace period.
        Remote nodes: closing their stdin makes the guard on the host end them."""
        for proc in procs.values():
            if proc.stdin is not None:
                with contextlib.suppress(OSError):
                    proc.stdin.close()
        me = psutil.Process()
        victims = self._descendants(me)
        for proc in victims:
            with contextlib.suppress(psutil.Error):
                proc.terminate()
        deadline = time.monotonic() + self.grace
        while time.monotonic() < deadline and any(p.poll() is None for p in procs.values()):
            time.sleep(0.05)
        for _ in range(3):
            victims = self._descendants(me)
            if not victims:
                break
            for proc in victims:
                with contextlib.suppress(psutil.Error):
                    proc.kill()
            psutil.wait_procs(victims, timeout=2)
        for proc in procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
        self._reap_orphans()

    @staticmethod
    def _descendants(me: psutil.Process) -> list[psutil.Process]:
        try:
            return [p for p in me.children(recursive=True) if p.status() != psutil.STATUS_ZOMBIE]
        except psutil.Error:
            return []

    @staticmethod
    def _reap_orphans() -> None:
        """As subreaper we inherit orphaned workers: collect their exit status."""
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return


def tail(path: Path, lines: int = 20) -> list[str]:
    """The last ``lines`` lines of a text file ([] if missing)."""
    try:
        return path.read_text(errors="replace").splitlines()[-lines:]
    except OSError:
        return []
