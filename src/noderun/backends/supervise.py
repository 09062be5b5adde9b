"""One restart loop for every backend: run the gang, record how each attempt ended in the run
record, and start it again whole while ``--max-restarts`` allows and a restart can help (as
torch elastic's agent does for its workers). The verbs build the backend; this owns attempts."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from noderun import cancel_request, rundir, timeline
from noderun.backends.result import Result
from noderun.outcome import Outcome, announce_restart, restart_refusal
from noderun.plan.stall import StallPolicy
from noderun.run_record import RunRecord


class Backend(Protocol):
    """One launch of the whole gang on some nodes: simulated here, SSH hosts, a hand-started
    node (``local.LocalBackend``) or a SLURM step (``slurm_step.StepBackend``)."""

    @property
    def run_dir(self) -> Path: ...

    def banner(self) -> str:
        """The line said before each attempt: the shape, where it meets, the run directory."""
        ...

    def describe(self) -> RunRecord:
        """A fresh record of this attempt: what runs where (not yet how it ended)."""
        ...

    def run(self) -> Result:
        """Start the gang, wait until it ends (or a signal stops it), tear it down."""
        ...

    def record(self, record: RunRecord, result: Result) -> None:
        """What only this backend knows about the ended attempt (exit codes per node, …)."""
        ...


@dataclasses.dataclass(frozen=True)
class Policy:
    """What the supervisor may do: restart the gang up to ``max_restarts`` times, and stop a
    stalled one (``stall``, watched by the backend)."""

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
        result = backend.run()
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


def cancelled(outcome: Outcome, run_dir: Path) -> Outcome:
    """``outcome`` as `noderun cancel` made it: a run that did not complete first ends
    ``cancelled`` (its ranks were preempted, signalled or the launcher interrupted)."""
    how = cancel_request.requested(run_dir)
    if how is None or outcome.status == "completed":
        return outcome
    return dataclasses.replace(outcome, cancelled=how)
