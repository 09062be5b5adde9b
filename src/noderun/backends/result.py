"""What a backend's run of the gang returns: one Result, one Failure, for every backend
(simulated nodes, SSH hosts, a hand-started node, a SLURM step). ``Result.outcome`` turns it
into the Outcome the verbs report and record."""

from __future__ import annotations

import dataclasses
import signal
from collections.abc import Iterable, Mapping
from pathlib import Path

from noderun import failures
from noderun.outcome import Outcome


def signal_text(code: int) -> str:
    """-9 -> "killed by SIGKILL", 3 -> "exit code 3"."""
    if code >= 0:
        return f"exit code {code}"
    try:
        return f"killed by {signal.Signals(-code).name}"
    except ValueError:
        return f"killed by signal {-code}"


@dataclasses.dataclass(frozen=True)
class WorkerExit:
    """A worker torchrun's agent saw fail, as its worker event says: ranks and exit code."""

    rank: int
    local_rank: int
    exit_code: int
    time: float | None = None  # seconds since the epoch, when the event says

    def candidate(self, node: int, error: str = "") -> failures.Candidate:
        """This exit as a first-failure candidate of node ``node``."""
        return failures.Candidate(node, self.rank, self.time, self.exit_code, error)


def seen_exits(exits: Mapping[int, Iterable[WorkerExit]]) -> list[failures.Candidate]:
    """torchrun's worker events (node -> its failed workers) as first-failure candidates."""
    return [e.candidate(node) for node, ended in exits.items() for e in ended]


@dataclasses.dataclass
class Failure:
    """The first failure: which rank (or node) on which host, and why, as precisely as the
    backend could tell."""

    node_rank: int | None = None
    rank: int | None = None
    local_rank: int | None = None
    exit_code: int | None = None  # that rank's (or agent's) own exit code, when known
    error: str | None = None  # "Type: message" the rank raised, when known
    host: str | None = None
    first: bool = False  # named by the earliest primary error record of the ranks
    said: str | None = None  # the whole line as someone else put it (node entry, srun)
    log: str | None = None  # file under logs/ to read more; default the rank's or agent's

    def reason(self) -> str:
        """Why, without where: "killed by SIGKILL: Error: …", "exit code 1", "agent failed"."""
        text = signal_text(self.exit_code) if self.exit_code is not None else "agent failed"
        return f"{text}: {self.error}" if self.error else text

    @property
    def summary(self) -> str:
        """One line naming rank, node and host when known, and why."""
        if self.said is not None:
            return self.said
        where = f"node {self.node_rank}" + (f" on {self.host}" if self.host else "")
        if self.rank is None:
            return f"{where} failed ({self.reason()})"
        why = f"failed first: {self.error}" if self.first else f"failed: {self.reason()}"
        return f"rank {self.rank} ({where}, local rank {self.local_rank}) {why}"

    def log_name(self) -> str | None:
        if self.log:
            return self.log
        if self.rank is not None:
            return f"rank{self.rank}.log"
        return f"node{self.node_rank}.agent.log" if self.node_rank is not None else None


@dataclasses.dataclass
class Result:
    """How one run of the gang ended."""

    exit_code: int
    duration: float = 0.0
    failure: Failure | None = None
    interrupted_by: str | None = None
    stalled: str | None = None  # the stall report, when the stall watch stopped the gang
    node_exit_codes: dict[int, int | None] = dataclasses.field(default_factory=dict)
    srun_exit_code: int | None = None  # a SLURM step's srun

    def outcome(self, run_dir: Path) -> Outcome:
        """This result as the one outcome every verb reports."""
        failure = None if self.stalled else self.failure
        log = failure.log_name() if failure else None
        return Outcome(
            duration=self.duration,
            failure=failure.summary if failure else None,
            failure_exit=failure.exit_code if failure else None,
            failure_rank=failure.rank if failure else None,
            log=run_dir / "logs" / log if log else None,
            interrupted_by=self.interrupted_by,
            interrupt_code=self.exit_code if self.interrupted_by else None,
            stalled=self.stalled,
        )
