"""One restart loop for every backend: run the gang, record how each attempt ended in the run
record, and start it again whole while ``--max-restarts`` allows and a restart can help (as
torch elastic's agent does for its workers). The verbs build the backend; this owns attempts."""

from __future__ import annotations

import dataclasses
import signal
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

from noderun import cancel_request, rundir, timeline
from noderun.backends.result import Result
from noderun.backends.stall import StallWatcher
from noderun.exit_codes import EXIT_STALLED
from noderun.outcome import Outcome, announce_restart, restart_refusal
from noderun.plan.stall import StallPolicy
from noderun.run_record import RunRecord


@dataclasses.dataclass(frozen=True)
class RankPlace:
    """Where one rank of a live run sits: its node, local rank and host."""

    rank: int
    node: int
    local_rank: int
    host: str


def rank_places(hosts: Sequence[str], nproc_per_node: int) -> list[RankPlace]:
    """Every rank of nodes on ``hosts`` (one per node), node-major as every launch numbers them."""
    return [
        RankPlace(node * nproc_per_node + local, node, local, host)
        for node, host in enumerate(hosts)
        for local in range(nproc_per_node)
    ]


class Backend(Protocol):
    """One launch of the whole gang on some nodes: simulated here, SSH hosts, a hand-started
    node (``local.LocalBackend``) or a SLURM step (``slurm_step.StepBackend``), built from the
    plan its pure ``plan.run`` function made of the request (``local_nodes``, ``hand_started``,
    ``ssh_hosts``, ``slurm_step``: what ``--dry-run`` prints). ``supervise`` runs it:
    ``start``, ``wait``, and ``cancel`` from a signal or the stall watch."""

    @property
    def run_dir(self) -> Path: ...

    def banner(self) -> str:
        """The line said before each attempt: the shape, where it meets, the run directory."""

    def describe(self) -> RunRecord:
        """A fresh record of this attempt: what runs where (not yet how it ended)."""

    def start(self, on_output: Callable[[], None] | None = None) -> None:
        """Start the gang; ``on_output`` is told of every rank line (the stall watch)."""

    def wait(self, on_end: Callable[[], None] | None = None) -> Result:
        """Until the gang ended or ``cancel`` stopped it (``on_end`` then, before the teardown);
        torn down, with the first failure named unless it was cancelled."""

    def cancel(self) -> None:
        """Stop the gang gracefully (safe from a signal handler, before start too)."""

    def record(self, record: RunRecord, result: Result) -> None:
        """What only this backend knows about the ended attempt (exit codes per node, …)."""

    def ranks(self) -> list[RankPlace]:
        """Every rank of the run (the whole world, also on nodes started elsewhere)."""

    def hosts(self) -> list[str]:
        """One host per node, as run.json records them."""

    def log_files(self) -> list[Path]:
        """The logs this run writes: every rank's, then its agents' or launcher's."""

    def roots(self) -> list[int]:
        """Processes started here whose descendants are the ranks (none: the ranks are not)."""

    def srun_job(self) -> str | None:
        """The SLURM job whose ranks are reached through srun (their stacks), or None."""


@dataclasses.dataclass(frozen=True)
class Policy:
    """What the supervisor may do: restart the gang up to ``max_restarts`` times, and watch it
    for stalls (``stall``: report one, or stop the gang)."""

    max_restarts: int = 0
    stall: StallPolicy | None = None


@dataclasses.dataclass
class Supervised:
    """How the run ended: its last attempt's outcome and result, and the record of them all."""

    outcome: Outcome
    result: Result
    record: RunRecord
    record_error: OSError | None = None  # run.json could not be written at the end


def supervise(
    backend: Backend,
    policy: Policy,
    record: RunRecord,
    relaunch: Callable[[int], Backend],
    since: float | None = None,
) -> Supervised:
    """Run the gang; after a failure, ``relaunch(restart n)`` and run it again whole. Every
    attempt is written to run.json before it starts and once it ended (stages of the
    timeline from ``since``, default now)."""
    attempt, previous = 0, None
    since = since or time.time()
    while True:
        run_dir = backend.run_dir
        timeline.stamp(run_dir, "launcher_started", "launcher", at=since)
        cancel_request.clear(run_dir)  # an earlier attempt's; a new one starts now
        rundir.write_record(run_dir, record)
        print(backend.banner(), flush=True)
        result = run_once(backend, policy.stall)
        timeline.stamp(run_dir, "teardown_done", "launcher")
        outcome = cancelled(result.outcome(run_dir), run_dir)
        record.end(outcome, rundir.now_iso())
        backend.record(record, result)
        record.timeline = timeline.gather(run_dir, since)
        refusal = restart_refusal(outcome, previous, attempt, policy.max_restarts)
        if refusal is not None:
            if policy.max_restarts and outcome.status != "completed":
                record.restart = f"not restarted: {refusal}"
            try:
                rundir.write_record(run_dir, record)
            except OSError as err:  # the verb says how the run went first, then this
                return Supervised(outcome, result, record, record_error=err)
            return Supervised(outcome, result, record)
        attempt, previous = attempt + 1, outcome
        record.restart = announce_restart(outcome, attempt, policy.max_restarts)
        rundir.write_record(run_dir, record)
        backend = relaunch(attempt)
        fresh = backend.describe()
        fresh.restart_count = attempt
        record = record.continued_by(fresh)
        since = time.time()


def run_once(backend: Backend, stall: StallPolicy | None) -> Result:
    """One attempt: start the gang, watch it for stalls, wait until it ends. SIGINT and
    SIGTERM cancel it (the run ends interrupted); a stall with --on-stall=kill too (stalled)."""
    run_dir, stopped = backend.run_dir, []

    def on_signal(signum: int, _frame: object) -> None:
        stopped.append(signum)
        backend.cancel()

    watcher = None
    if stall and stall.enabled:
        world = len(backend.ranks())
        watcher = StallWatcher(
            stall, run_dir, world, backend.srun_job(), backend.hosts(), on_kill=backend.cancel
        )

    def ended() -> None:
        timeline.stamp(run_dir, "step_ended", "launcher")
        if watcher:
            watcher.stop()

    handlers = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        backend.start(watcher.saw_output if watcher else None)
        if stopped:
            backend.cancel()  # a signal came while it started
        timeline.stamp(run_dir, "step_started", "launcher")
        if watcher:
            watcher.start(backend.roots())
        result = backend.wait(ended)
    finally:
        if watcher:
            watcher.stop()
        for s, handler in handlers.items():
            signal.signal(s, handler)
    if stopped:
        result.interrupted_by = signal.Signals(stopped[-1]).name
        result.exit_code, result.failure = 128 + stopped[-1], None
    elif watcher and watcher.killed:
        result.exit_code, result.stalled, result.failure = EXIT_STALLED, watcher.report, None
    return result


def cancelled(outcome: Outcome, run_dir: Path) -> Outcome:
    """``outcome`` as `noderun cancel` made it: a run that did not complete first ends
    ``cancelled`` (its ranks were preempted, signalled or the launcher interrupted)."""
    how = cancel_request.requested(run_dir)
    if how is None or outcome.status == "completed":
        return outcome
    return dataclasses.replace(outcome, cancelled=how)
