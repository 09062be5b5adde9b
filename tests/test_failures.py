"""Rank error records: the earliest primary error wins over consequences and later errors."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

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


# one rule for every launcher: failures.first_failure
_CLOSED = (
    "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by "
    "peer [10.0.0.2]:12345"
)


def test_a_killed_rank_beats_a_peer_that_lost_it_in_the_same_second() -> None:
    lost = failures.Candidate(1, 2, 100.2, 1, _CLOSED)
    killed = failures.Candidate(1, 3, 100.9, -9)
    assert failures.first_failure([lost, killed]) == killed
    assert lost.consequence and killed.own_signal and not killed.consequence


def test_a_peer_that_lost_it_never_beats_a_cause_even_a_second_earlier() -> None:
    lost = failures.Candidate(0, 0, 99.0, 1, _CLOSED)
    raised = failures.Candidate(1, 3, 101.0, 1, "ValueError: bad batch")
    assert failures.first_failure([lost, raised]) == raised


def test_among_causes_the_earliest_second_wins_then_a_signal_or_own_error() -> None:
    early = failures.Candidate(0, 1, 100.0, 1)  # exit 1, nothing known
    late = failures.Candidate(0, 2, 101.5, -11)
    assert failures.first_failure([late, early]) == early
    same_second = failures.Candidate(0, 3, 100.7, -11)
    assert failures.first_failure([early, same_second]) == same_second


def test_sigterm_from_the_launcher_is_a_consequence_and_only_consequences_keep_the_clock() -> None:
    stopped = failures.Candidate(0, 0, 100.0, -15)
    assert stopped.consequence
    watchdog = failures.Candidate(
        0, 1, 99.0, 1, "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5)"
    )
    assert failures.first_failure([stopped, watchdog]) == watchdog
    assert failures.first_failure([]) is None


def test_a_rank_that_ended_with_its_error_beats_one_the_teardown_stopped_after_the_same_error() -> (
    None
):
    # both nodes refuse the same input; node 1 exits 2 first, the teardown SIGTERMs node 0's
    # rank while it is leaving with the same error (seen ~1 in 10 runs of the LLM example)
    stopped = failures.Candidate(0, 0, 100.0, -15, "UsageError: data.dataset_path x does not exist")
    ended = failures.Candidate(1, 2, 100.0, 2, "UsageError: data.dataset_path x does not exist")
    assert not stopped.consequence and stopped.strength() == 1 and ended.strength() == 0
    assert failures.first_failure([stopped, ended]) == ended
    # a second earlier, its own error still counts: it raised before the other rank failed
    assert failures.first_failure([dataclasses.replace(stopped, time=99.0), ended]).rank == 0


def test_a_rank_that_fails_before_init_is_recorded_from_the_launchers_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NODERUN__RUN_DIR", str(tmp_path))
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("GROUP_RANK", "1")
    failures.record(ValueError("data.dataset_path x does not exist\nsecond line"), 2)
    (written,) = failures.read_all(tmp_path / "logs")
    assert (written.rank, written.node_rank, written.exit_code) == (3, 1, 2)
    assert written.error == "ValueError: data.dataset_path x does not exist"
    monkeypatch.delenv("RANK")  # no rank known: nothing is written, nothing raised
    failures.record(ValueError("again"), 2, run_dir=tmp_path / "other")
    assert not (tmp_path / "other").exists()


def test_a_refusal_before_init_is_recorded_without_importing_torch(tmp_path) -> None:
    """A script's refusal of its input (run_main, before noderun.init) leaves the rank's error
    record from the launcher's variables, and pays nothing for torch (an LLM config mistake
    is told in 0.1 CPU-s, not 1.3)."""
    (tmp_path / "logs").mkdir()
    code = (
        "import sys\nfrom noderun import UsageError, run_main\n"
        "def main():\n    raise UsageError('training.max_steps is not a number', 'give one')\n"
        "code = run_main(main)\nprint(code, 'torch' in sys.modules)"
    )
    env = {**os.environ, "RANK": "3", "GROUP_RANK": "1", "NODERUN__RUN_DIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert done.stdout.split() == ["2", "False"], done.stderr
    assert done.stderr.startswith("UsageError: training.max_steps is not a number")
    (record,) = failures.read_all(tmp_path / "logs")
    assert record.rank == 3 and record.exit_code == 2, record
