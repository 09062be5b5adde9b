"""Rank error records: the earliest primary error wins over consequences and later errors."""

from __future__ import annotations

from pathlib import Path

from noderun import failures
from noderun.failures import ErrorRecord


def _record(rank: int, time: float, error: str, exit_code: int = 1) -> ErrorRecord:
    return ErrorRecord(rank, rank // 2, "host", time, error, exit_code)


def test_round_trip_and_first_primary(tmp_path: Path) -> None:
    records = [
        _record(0, 10.0, "RuntimeError: [pair.cc:553] Connection closed by peer [127.0.0.1]:1"),
        _record(1, 12.0, "ValueError: later"),
        _record(3, 11.0, "UsageError: checkpoint x is incomplete", exit_code=2),
    ]
    for record in records:
        failures.write(tmp_path, record)
    (tmp_path / "rank9.error.json").write_text("{not json")  # skipped, not fatal
    read = failures.read_all(tmp_path)
    assert sorted(read, key=lambda r: r.rank) == records
    first = failures.first_primary(read)
    assert first is not None
    assert (first.rank, first.exit_code) == (3, 2)


def test_only_consequences_means_no_primary() -> None:
    assert failures.first_primary([_record(0, 1.0, "x: Connection reset by peer")]) is None
    assert failures.first_primary([]) is None
