"""Stage stamps from several processes fold into first/last/count per stage, in job order."""

from __future__ import annotations

import json
import time
from pathlib import Path

from noderun import timeline


def _line(run_dir: Path, stage: str, t: float, who: str) -> None:
    with open(timeline.path(run_dir), "a") as handle:
        handle.write(json.dumps({"stage": stage, "t": t, "who": who}) + "\n")


def test_gather_folds_processes_and_orders_stages(tmp_path: Path) -> None:
    timeline.stamp(tmp_path, "launcher_started", "launcher", at=100.0)
    for rank, t in enumerate((101.5, 101.2, 101.9)):
        _line(tmp_path, "rank_started", t, f"rank{rank}")
    _line(tmp_path, "step_started", 100.4, "launcher")
    _line(tmp_path, "custom_thing", 100.1, "x")  # unknown stages sort after the known ones
    with open(timeline.path(tmp_path), "a") as handle:
        handle.write('{"stage": "rank_exi')  # a process killed mid-write
    rows = timeline.gather(tmp_path)
    assert [r["stage"] for r in rows] == [
        "launcher_started",
        "step_started",
        "rank_started",
        "custom_thing",
    ]
    ranks = rows[2]
    assert (ranks["first"], ranks["last"], ranks["count"]) == (101.2, 101.9, 3)
    lines = timeline.table(rows)
    assert lines[1].split() == ["launcher_started", "0.000", "1"]
    assert lines[3].split() == ["rank_started", "1.200", "1.900", "3"]


def test_since_drops_an_earlier_attempt(tmp_path: Path) -> None:
    timeline.stamp(tmp_path, "rank_started", "rank0", at=10.0)
    timeline.stamp(tmp_path, "rank_started", "rank0", at=20.0)
    assert [(r["first"], r["count"]) for r in timeline.gather(tmp_path, since=15.0)] == [(20.0, 1)]


def test_stamp_never_raises_and_process_start_is_before_now(tmp_path: Path) -> None:
    (tmp_path / "logs").write_text("a file where the folder should be")
    timeline.stamp(tmp_path, "x")  # best effort: nothing raised
    timeline.stamp(None, "x")
    assert timeline.gather(tmp_path) == []
    assert timeline.table([])[0].startswith("no timeline")
    assert 0 <= time.time() - timeline.process_start() < 3600
