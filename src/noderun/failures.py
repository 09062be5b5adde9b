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
from collections.abc import Iterable
from pathlib import Path

# errors a rank raises only because another rank died first
SECONDARY = ("Connection closed by peer", "Connection reset by peer", "remote worker crash")


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
