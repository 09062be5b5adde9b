"""The rank logs' time index: the log router records where each second's lines begin, and
`noderun logs --since` cuts inside a log whose lines carry no time of their own."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from noderun import cli, log_times
from noderun.backends.log_router import LogRouter

T0 = 1_795_000_000  # an epoch second


def _routed(logs: Path, lines: list[tuple[float, str]], rank: int = 1) -> None:
    """``lines`` (time, text) written by a router whose clock says those times."""
    times = iter([t for t, _ in lines])
    router = LogRouter(logs, io.StringIO(), 1, clock=lambda: next(times))
    for _, text in lines:
        router.rank_line("0", rank, text)
    router.close()


def test_the_router_indexes_the_first_line_of_each_second(tmp_path: Path) -> None:
    (tmp_path / "rank1.log").write_text("from an earlier attempt\n")
    _routed(tmp_path, [(T0 + 0.2, "a"), (T0 + 0.9, "bé"), (T0 + 3.1, "c"), (T0 + 3.5, "d")])
    log = tmp_path / "rank1.log"
    assert log.read_text() == "from an earlier attempt\na\nbé\nc\nd\n"
    start = len("from an earlier attempt\n")
    after_b = start + len("a\nbé\n".encode())  # offsets in bytes, not characters
    assert log_times.read_entries(log_times.index_path(log)) == [(T0, start), (T0 + 3, after_b)]
    assert log.read_bytes()[after_b:] == b"c\nd\n"
    assert log_times.offset_since(log, T0 + 1.5) == after_b
    assert log_times.offset_since(log, T0 + 3.9) == after_b  # to the second
    assert log_times.offset_since(log, T0 + 4) == log.stat().st_size  # nothing since
    assert log_times.offset_since(log, T0 - 50) == 0  # the unindexed start counts as then
    assert log_times.offset_since(tmp_path / "other.log", T0) is None  # no index: unknown
    assert not (tmp_path / "node0.agent.log.times").exists()


def _iso(second: float) -> str:
    return datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%S")


def test_logs_since_cuts_inside_an_indexed_rank_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "run"
    (run_dir / "logs").mkdir(parents=True)
    shape = {"nnodes": 2, "nproc_per_node": 1, "world_size": 2, "master_addr": "x"}
    record = {"backend": "local", "status": "completed", "topology": shape}
    (run_dir / "run.json").write_text(json.dumps(record))
    steps = [(T0 + s, f"step {s}") for s in range(0, 100, 10)]
    _routed(run_dir / "logs", steps, rank=1)
    _routed(run_dir / "logs", steps[:3], rank=0)
    assert cli.main(["logs", str(run_dir), "--since", _iso(T0 + 75)]) == 0
    assert capsys.readouterr().out == "1| step 80\n1| step 90\n"  # rank 0 wrote nothing since
    assert cli.main(["logs", str(run_dir), "--rank", "1", "--since", _iso(T0 + 90)]) == 0
    assert capsys.readouterr().out == "step 90\n"
    log_times.index_path(run_dir / "logs" / "rank1.log").unlink()  # no index: the whole log
    assert cli.main(["logs", str(run_dir), "--rank", "1", "--since", _iso(T0 + 90)]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "step 0"
