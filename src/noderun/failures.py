"""Rank error records: written by a failing rank, read by launchers to name the first failure.

A rank that dies of an uncaught exception (or refuses its input) leaves
``RUN_DIR/logs/rank<R>.error.json`` with a precise time, so the launcher can name the rank
that failed first rather than a peer that merely lost its connection to it. No torch here:
launchers import this.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import re
import signal
import socket
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from noderun.topology.contract import VARIABLES

# errors a rank raises only because another rank died first: it lost its peer, or waited for
# it in a collective until the watchdog gave up (c10d's ProcessGroupNCCL/gloo wording)
SECONDARY = (
    "Connection closed by peer",
    "Connection reset by peer",
    "remote worker crash",
    "Broken pipe",
    "Watchdog caught collective operation timeout",
    "Timed out waiting",
    "ProcessGroupNCCL's watchdog",
    "Socket Timeout",
    "Failed to recv, got 0 bytes",
    "NCCL communicator was aborted",
    "ChildFailedError",  # torchrun's summary of a child that failed: another process's failure
)
# the last line of a traceback: the exception a rank raised (its own words)
_EXCEPTION_LINE = re.compile(
    r"^(?:\[rank\d+\]:\s*)?([A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit|Timeout)\b.*)$"
)
# srun's words for how a task ended -> its exit code (negative: the signal)
_SRUN_ENDS = {
    "Killed": -signal.SIGKILL,
    "Segmentation fault": -signal.SIGSEGV,
    "Aborted": -signal.SIGABRT,
    "Bus error": -signal.SIGBUS,
    "Terminated": -signal.SIGTERM,
}


def exception_line(text: str) -> str | None:
    """``ValueError: boom`` from a traceback's last line, else None."""
    match = _EXCEPTION_LINE.match(text.strip())
    return match.group(1)[:300] if match else None


def srun_exit_code(text: str) -> int | None:
    """The exit code in srun's ``task N: Exited with exit code 3`` / ``task N: Killed``."""
    if m := re.search(r"Exited with exit code (\d+)", text):
        return int(m.group(1))
    return next((code for word, code in _SRUN_ENDS.items() if text.startswith(word)), None)


# signals a launcher sends to stop the gang once a rank failed: a consequence, not a cause
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


@dataclasses.dataclass(frozen=True)
class ErrorRecord:
    rank: int
    node_rank: int
    host: str
    time: float
    error: str  # "Type: message", first line
    exit_code: int = 1

    @property
    def secondary(self) -> bool:
        return is_secondary(self.error)


def is_secondary(error: str) -> bool:
    """True for errors that are a consequence of another rank's failure."""
    return any(marker in error for marker in SECONDARY)


def write(logs: Path, record: ErrorRecord) -> None:
    """Best effort: a rank that is failing must not fail again while reporting it."""
    with contextlib.suppress(OSError):
        logs.mkdir(parents=True, exist_ok=True)
        (logs / f"rank{record.rank}.error.json").write_text(json.dumps(dataclasses.asdict(record)))


def record(
    error: BaseException,
    exit_code: int = 1,
    run_dir: Path | None = None,
    rank: int | None = None,
    node_rank: int | None = None,
) -> None:
    """Leave this rank's error record; what is not given comes from the launcher's environment
    (``RANK``, ``GROUP_RANK``, the run directory), so a rank that fails before ``init()`` is
    recorded too. Nothing without a run directory and a rank. Best effort, never raises."""
    with contextlib.suppress(Exception):  # a failing rank must not fail again reporting it
        env_dir = next((os.environ[v] for v in VARIABLES["run_dir"] if os.environ.get(v)), "")
        env_rank, env_node = os.environ.get("RANK", ""), os.environ.get("GROUP_RANK", "")
        run_dir = run_dir or (Path(env_dir) if env_dir else None)
        rank = rank if rank is not None else int(env_rank) if env_rank.isdigit() else None
        if run_dir is None or rank is None:
            return
        node = node_rank if node_rank is not None else int(env_node) if env_node.isdigit() else 0
        text = f"{type(error).__name__}: {error}".splitlines()[0][:500]
        host, when = socket.gethostname(), time.time()
        write(run_dir / "logs", ErrorRecord(rank, node, host, when, text, exit_code))


def read_all(logs: Path) -> list[ErrorRecord]:
    """Every readable record under ``logs`` (malformed ones are skipped)."""
    records = []
    for path in sorted(logs.glob("rank*.error.json")):
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            data = json.loads(path.read_text())
            records.append(
                ErrorRecord(
                    rank=int(data["rank"]),
                    node_rank=int(data.get("node_rank", 0)),
                    host=str(data.get("host", "")),
                    time=float(data["time"]),
                    error=str(data["error"]),
                    exit_code=int(data.get("exit_code", 1)),
                )
            )
    return records


def first_primary(records: Iterable[ErrorRecord]) -> ErrorRecord | None:
    """The earliest record that is not a consequence of another failure."""
    primary = [r for r in records if not r.secondary]
    return min(primary, key=lambda r: r.time) if primary else None


@dataclasses.dataclass(frozen=True)
class Candidate:
    """A rank (or node) that ended badly, as some launcher saw it; ``time`` in epoch seconds
    (torchrun's summaries have one-second resolution), ``exit_code`` < 0 for a signal."""

    node_rank: int
    rank: int | None = None
    time: float | None = None
    exit_code: int | None = None
    error: str = ""  # the rank's own last error line, when known

    @property
    def own_signal(self) -> bool:
        """Died of a signal nobody sent to stop the gang (SIGKILL, SIGSEGV, SIGABRT, …)."""
        return self.exit_code is not None and self.exit_code < 0 and not self.stopped

    @property
    def stopped(self) -> bool:
        return self.exit_code is not None and -self.exit_code in STOP_SIGNALS

    @property
    def consequence(self) -> bool:
        """It only lost a peer, or was stopped by the launcher after another rank failed."""
        return (is_secondary(self.error) and not self.own_signal) or (
            self.stopped and not self.error
        )

    def strength(self) -> int:
        """0: a cause of its own (a signal, its own error, and it ended by itself); 1: failed,
        why unknown, or its own error but the launcher's teardown ended it (it may have been
        on its way out with that error, or stuck after it); 2: a consequence of another
        rank's failure."""
        if self.consequence:
            return 2
        return 0 if self.own_signal or (self.error and not self.stopped) else 1


def first_failure(candidates: Iterable[Candidate]) -> Candidate | None:
    """The rank that failed first for its own reason: one rule for every launcher.

    Ranks that only lost a peer come after every rank that failed on its own, whatever the
    clock says; among the others the earliest second wins, and within one second a signal or
    an error of its own beats an exit with nothing to say. Unknown times sort last.
    """
    ranked = sorted(candidates, key=_order)
    return ranked[0] if ranked else None


def _order(c: Candidate) -> tuple[int, float, int, float, int, int]:
    strength = c.strength()
    when = math.inf if c.time is None else c.time
    return (
        int(strength == 2),
        math.floor(when) if c.time is not None else math.inf,
        strength,
        when,
        c.node_rank,
        -1 if c.rank is None else c.rank,
    )


def candidates_of(records: Iterable[ErrorRecord]) -> Iterator[Candidate]:
    """The error records as candidates."""
    for r in records:
        yield Candidate(r.node_rank, r.rank, r.time, r.exit_code, r.error)


def first_cause(
    records: Sequence[ErrorRecord],
    seen: Iterable[Candidate] = (),
    last_error: Mapping[int, str] | None = None,
    node_of: Callable[[int], int] = lambda rank: 0,
) -> tuple[Candidate | None, ErrorRecord | None]:
    """:func:`first_failure` over one candidate per rank: its error record, else what the
    backend saw (``seen``: worker events, srun's reports), else its last exception line
    (``last_error``, also the error of a seen one without); with that rank's record."""
    errors = last_error or {}
    per_rank = {c.rank: c for c in candidates_of(records)}
    for c in seen:
        if c.rank is not None and not c.error:
            c = dataclasses.replace(c, error=errors.get(c.rank, ""))
        per_rank.setdefault(c.rank, c)
    for rank, error in errors.items():
        per_rank.setdefault(rank, Candidate(node_of(rank), rank, error=error))
    first = first_failure(per_rank.values())
    return first, next((r for r in records if first and r.rank == first.rank), None)


def describe(failure: Mapping[str, Any], hosts: Sequence[str] = ()) -> str:
    """run.json's ``failure`` record in words, one way for every verb::

        rank 3 (node 1 on sshhost2, local rank 1): killed by SIGKILL

    A reason that already names the rank or node (SLURM's launcher writes the whole sentence)
    is kept as it is; a field nobody recorded is left out, never printed as None.
    """
    reason = str(failure.get("reason") or f"exit code {failure.get('exit_code')}")
    if re.match(r"(rank|node|ranks|nodes) \d", reason):
        return reason
    rank, node, local = failure.get("rank"), failure.get("node_rank"), failure.get("local_rank")
    host = failure.get("host") or (
        hosts[node] if isinstance(node, int) and 0 <= node < len(hosts) else None
    )
    where = ", ".join(
        part
        for part in (
            (f"node {node}" if node is not None else "") + (f" on {host}" if host else ""),
            f"local rank {local}" if local is not None and rank is not None else "",
        )
        if part.strip()
    ).strip()
    if rank is not None:
        return f"rank {rank}{f' ({where})' if where else ''}: {reason}"
    return f"{where}: {reason}" if where else reason
