"""Run a LaunchPlan's agents on this machine and supervise them as one gang."""

from __future__ import annotations

import contextlib
import ctypes
import itertools
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

import psutil

from noderun import failures, proc_guard, rundir
from noderun.backends.log_router import LogRouter
from noderun.backends.result import Failure, Result, seen_exits
from noderun.backends.supervise import RankPlace, rank_places
from noderun.backends.templated import NodeTemplate, TemplatedAgent, open_template
from noderun.plan import LaunchPlan, NodeCommand
from noderun.run_record import RunRecord, RunShape, versions

PR_SET_CHILD_SUBREAPER = 36
# how long other nodes may take to report once the first failure seen is only secondary
SECONDARY_GRACE_SEC = 5.0
SSH_FAILED = 255  # ssh's own exit status: the connection, not the command, failed


class _NodeOutput:
    """One agent's output, line by line, to the router; counts the rank lines torchrun's tee
    passed on, so the ones it dropped can be caught up from its rank files."""

    def __init__(self, supervisor: LocalSupervisor, node_rank: int) -> None:
        self.router = supervisor.router
        self.node = node_rank
        self.prefix = supervisor.node(node_rank).prefix
        self.told: dict[tuple[int, str], int] = {}  # (local rank, stream) -> lines the tee gave

    def pump(self, stream: IO[str], name: str) -> None:
        for line in iter(stream.readline, ""):
            self.feed(line, name)
        stream.close()

    def feed(self, raw: str, stream: str) -> None:
        local = self.router.torchrun_line(self.node, self.prefix, raw.rstrip("\n"))
        if local is not None:
            self.told[(local, stream)] = self.told.get((local, stream), 0) + 1

    def rank_line(self, local: int, text: str) -> None:
        rank = self.node * self.router.nproc_per_node + local
        self.router.rank_line(self.prefix, rank, text)

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
    """Start every agent in its own session, stream output, and tear the gang down together:
    ``start``, then ``wait`` (``cancel`` from a signal handler or the stall watch stops it)."""

    grace = 3.0  # seconds between SIGTERM and SIGKILL at teardown

    def __init__(
        self,
        plan: LaunchPlan,
        console: IO[str] | None = None,
        show: Callable[[int], bool] | None = None,
    ) -> None:
        self.plan = plan
        self.logs = plan.run_dir / "logs"
        self.router = LogRouter(self.logs, console or sys.stdout, plan.nproc_per_node, show)
        self._cancelled = False
        self._began = time.monotonic()
        self._procs: dict[int, subprocess.Popen[str] | TemplatedAgent] = {}
        self._template: NodeTemplate | None = None  # forks the local agents (templated.py)
        self._forked: set[int] = set()  # the node ranks it forks
        self._sinks: dict[int, _NodeOutput] = {}
        self._threads: dict[int, list[threading.Thread]] = {}
        self._before: dict[int, set[str]] = {}  # an earlier attempt's torchelastic folders

    def node(self, node_rank: int) -> NodeCommand:
        """The plan's node of that rank (a hand-started node's plan holds only its own)."""
        return next(n for n in self.plan.nodes if n.node_rank == node_rank)

    def hosts(self) -> list[str]:
        """One host per node: SSH's hosts, else this machine's name (as run.json says)."""
        plan = self.plan
        if any(node.remote for node in plan.nodes):
            return [node.host for node in plan.nodes]
        return [socket.gethostname()] * plan.nnodes

    def ranks(self) -> list[RankPlace]:
        return rank_places(self.hosts(), self.plan.nproc_per_node)

    def log_files(self) -> list[Path]:
        ranks = [f"rank{rank}.log" for rank in range(self.plan.world_size)]
        agents = [f"node{node.node_rank}.agent.log" for node in self.plan.nodes]
        return [self.logs / name for name in ranks + agents]

    def roots(self) -> list[int]:
        return [proc.pid for proc in self._procs.values()]

    def cancel(self) -> None:
        self._cancelled = True  # wait() notices within 50 ms and tears the gang down

    def _elastic_root(self, node_rank: int) -> Path:
        return self.logs / "torchelastic" / f"node{node_rank}"

    def run(self) -> Result:
        self.start()
        return self.wait()

    def start(self, on_output: Callable[[], None] | None = None) -> None:
        """Start every node's agent; ``on_output`` is told of each rank line."""
        self.router.on_rank_output = on_output
        self.logs.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(OSError, AttributeError):
            # orphaned workers (their agent killed) come back to us, so none escapes teardown
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        self._began = time.monotonic()
        self._before = {
            node.node_rank: {p.name for p in self._elastic_root(node.node_rank).glob("*")}
            for node in self.plan.nodes
        }
        try:
            envs = {node.node_rank: self._env(node) for node in self.plan.nodes}
            self._template, self._forked = open_template(self.plan.nodes, envs)
            for node in self.plan.nodes:
                self._start_node(node, envs[node.node_rank])
        except BaseException:
            self._close()
            raise

    @staticmethod
    def _env(node: NodeCommand) -> dict[str, str]:
        # a rank that starts after its agent already died (the launcher SIGKILLed before the
        # rank could ask for a parent-death signal) sees this pid gone
        alive = {} if node.remote else {proc_guard.LAUNCHER_PID: str(os.getpid())}
        return {**os.environ, **node.env, **alive}

    def _fork(self, node: NodeCommand, env: dict[str, str]) -> TemplatedAgent | None:
        """The node's agent forked from the template, or None (then it is exec'd)."""
        if self._template is None or node.node_rank not in self._forked:
            return None
        try:
            return self._template.spawn(node.argv, env, os.getcwd())
        except OSError:
            return None

    def _start_node(self, node: NodeCommand, env: dict[str, str]) -> None:
        proc = self._fork(node, env) or subprocess.Popen(
            node.argv,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            # over SSH the far end's guard ends the node when this pipe closes
            stdin=subprocess.PIPE if node.remote else subprocess.DEVNULL,
            text=True,
            start_new_session=True,
            preexec_fn=proc_guard.die_with_parent_hook(),  # SIGKILLed with noderun
        )
        self._procs[node.node_rank] = proc
        if node.stdin_env and proc.stdin is not None:  # the far end's guard reads it
            with contextlib.suppress(OSError):
                proc.stdin.write(json.dumps(dict(node.stdin_env)) + "\n")
                proc.stdin.flush()
        sink = self._sinks[node.node_rank] = _NodeOutput(self, node.node_rank)
        self._threads[node.node_rank] = []
        for name, stream in (("stdout", proc.stdout), ("stderr", proc.stderr)):
            assert stream is not None
            thread = threading.Thread(target=sink.pump, args=(stream, name), daemon=True)
            thread.start()
            self._threads[node.node_rank].append(thread)

    def _close(self) -> None:
        """Tear the gang down, read its output to the end (and the rank lines each node's tee
        dropped, once it was read to its end: earlier, counting would repeat lines)."""
        self._teardown()
        for node_threads in self._threads.values():
            for thread in node_threads:
                thread.join(timeout=5)
        for node_rank, sink in self._sinks.items():
            if not any(t.is_alive() for t in self._threads[node_rank]):
                sink.catch_up(elastic_files(self._elastic_root(node_rank), self._before[node_rank]))
        self.router.close()

    def wait(self, on_end: Callable[[], None] | None = None) -> Result:
        """Until every agent succeeded, one failed or ``cancel`` was called; ``on_end`` runs
        then, before the teardown. The first failure is named unless it was cancelled."""
        try:
            failed_node = self._watch()
            failed_nodes = self._settle(failed_node)
            if on_end is not None:
                on_end()
        finally:
            self._close()
        codes = {n: p.returncode for n, p in self._procs.items()}
        result = Result(exit_code=0, node_exit_codes=codes, duration=time.monotonic() - self._began)
        if failed_node is not None and not self._cancelled:
            failed_node = self._root_node(failed_nodes)
            cause, nproc = self._cause(failed_node), self.plan.nproc_per_node
            failure = Failure(
                node_rank=failed_node,
                rank=cause.rank if cause else None,
                local_rank=None if cause is None or cause.rank is None else cause.rank % nproc,
                exit_code=cause.exit_code if cause else codes[failed_node],
            )
            failure = self._first_failure(failure)
            if failure.rank is not None and failure.error is None:
                failure.error = self.router.last_error.get(failure.rank)
            node = self.node(failed_node if failure.node_rank is None else failure.node_rank)
            if node.remote:
                failure.host = node.host
                if failure.rank is None and codes[node.node_rank] == SSH_FAILED:
                    failure.error = failure.error or self.router.last_agent_line.get(node.node_rank)
            result.failure = failure
            result.exit_code = 1
        return result

    def _settle(self, failed: int | None) -> list[int]:
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
        while time.monotonic() < deadline and not self._cancelled:
            for node, proc in self._procs.items():
                if node not in seen and proc.poll() not in (None, 0):
                    seen.append(node)
            if all(p.poll() is not None for p in self._procs.values()):
                break
            time.sleep(0.05)
        return seen

    def _cause(self, node: int) -> failures.Candidate | None:
        """The worker of ``node`` whose exit (torchrun's worker events) most likely started it,
        by the one rule (a rank whose error record says it lost a peer is a consequence)."""
        lost = {r.rank: r.error for r in failures.read_all(self.logs) if r.secondary}
        exits = self.router.worker_exits.get(node, [])
        return failures.first_failure(e.candidate(node, lost.get(e.rank, "")) for e in exits)

    def _root_node(self, failed: list[int]) -> int:
        """The first failed node whose failing worker did not just lose a peer."""
        for node in failed:
            cause = self._cause(node)
            if cause is None or not failures.is_secondary(cause.error):
                return node
        return failed[0]

    def _first_failure(self, observed: Failure) -> Failure:
        """The rank that failed first for its own reason (``failures.first_cause``, one rule
        for every backend) over the ranks' error records, torchrun's worker events (``observed``
        is one of them) and the ranks' own error lines; ``observed`` when none names a cause."""
        nproc, seen = self.plan.nproc_per_node, seen_exits(self.router.worker_exits)
        first, record = failures.first_cause(
            failures.read_all(self.logs), seen, self.router.last_error, lambda r: r // nproc
        )
        if first is None or first.rank is None or first.consequence:
            return observed
        return Failure(
            node_rank=first.node_rank,
            rank=first.rank,
            local_rank=first.rank % nproc,
            exit_code=1 if first.exit_code is None else first.exit_code,  # it raised
            error=record.error if record else None,
        )

    def _watch(self) -> int | None:
        """Wait until all agents succeed (None), one fails (its node), or it is cancelled."""
        while not self._cancelled:
            done = {n: p.poll() for n, p in self._procs.items()}
            for node, code in done.items():
                if code not in (None, 0):
                    return node
            if all(code == 0 for code in done.values()):
                return None
            time.sleep(0.05)
        return None

    def _teardown(self) -> None:
        """SIGTERM every agent and worker, SIGKILL what is left after the grace period.
        Remote nodes: closing their stdin makes the guard on the host end them."""
        procs = self._procs
        # the template outlives its agents to report how they ended; closed once they did
        spare = {self._template.pid} if self._template else set()
        for proc in procs.values():
            if proc.stdin is not None:
                with contextlib.suppress(OSError):
                    proc.stdin.close()
        me = psutil.Process()
        victims = self._descendants(me, spare)
        for proc in victims:
            with contextlib.suppress(psutil.Error):
                proc.terminate()
        deadline = time.monotonic() + self.grace
        while time.monotonic() < deadline and any(p.poll() is None for p in procs.values()):
            time.sleep(0.05)
        for _ in range(3):
            victims = self._descendants(me, spare)
            if not victims:
                break
            for proc in victims:
                with contextlib.suppress(psutil.Error):
                    proc.kill()
            psutil.wait_procs(victims, timeout=2)
        for proc in procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
        if self._template is not None:
            self._template.close()
            self._template = None
        self._reap_orphans()

    @staticmethod
    def _descendants(me: psutil.Process, spare: set[int]) -> list[psutil.Process]:
        try:
            return [
                p
                for p in me.children(recursive=True)
                if p.pid not in spare and p.status() != psutil.STATUS_ZOMBIE
            ]
        except psutil.Error:
            return []

    @staticmethod
    def _reap_orphans() -> None:
        """As subreaper we inherit orphaned workers: collect their exit status."""
        for _ in proc_guard.reap_exited():
            pass


def tail(path: Path, lines: int = 20) -> list[str]:
    """The last ``lines`` lines of a text file ([] if missing)."""
    try:
        return path.read_text(errors="replace").splitlines()[-lines:]
    except OSError:
        return []


class LocalBackend(LocalSupervisor):
    """Simulated nodes on this machine, or the one node started here by hand: the plan's
    agents, run and torn down as one gang (``supervise`` runs it)."""

    def __init__(
        self, plan: LaunchPlan, command: list[str], show: Callable[[int], bool] | None = None
    ) -> None:
        super().__init__(plan, show=show)
        self.command = command

    @property
    def run_dir(self) -> Path:
        return self.plan.run_dir

    def srun_job(self) -> None:
        return None  # every rank is a child of this process (its stacks are taken here)

    def banner(self) -> str:
        plan = self.plan
        return (
            f"noderun: {plan.nnodes} node(s) x {plan.nproc_per_node} = {plan.world_size} ranks, "
            f"master {plan.master_addr}:{plan.master_port}, run dir {plan.run_dir}"
        )

    def describe(self) -> RunRecord:
        plan = self.plan
        return RunRecord(
            command=self.command,
            backend="ssh" if any(node.remote for node in plan.nodes) else "local",
            script=plan.script,
            script_args=list(plan.script_args),
            entry=plan.entry.value,
            topology=RunShape(
                nnodes=plan.nnodes,
                nproc_per_node=plan.nproc_per_node,
                world_size=plan.world_size,
                master_addr=plan.master_addr,
                master_port=plan.master_port,
            ),
            hosts=self.hosts(),
            versions=versions(),
            cwd=os.getcwd(),
            start_time=rundir.now_iso(),
        )

    def record(self, record: RunRecord, result: Result) -> None:
        record.node_exit_codes = {str(k): v for k, v in result.node_exit_codes.items()}
        failure = result.failure
        if failure and record.failure:  # where and why, as this backend knows it
            record.failure.node_rank = failure.node_rank
            record.failure.local_rank = failure.local_rank
            record.failure.reason = failure.reason()
