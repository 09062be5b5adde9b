"""The sweep's result: resume choice, final metrics, sweep.csv and the printed table."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from noderun.sweep.grid import Point
from noderun.sweep.runner import already_done, final_metrics
from noderun.sweep.table import SweepRow, rows_csv, rows_text


def _run_dir(tmp_path: Path, name: str, status: str | None, metrics: str = "") -> Path:
    run_dir = tmp_path / name
    run_dir.mkdir()
    if status:
        (run_dir / "run.json").write_text(json.dumps({"backend": "local", "status": status}))
    if metrics:
        (run_dir / "metrics.csv").write_text(metrics)
    return run_dir


def test_only_a_completed_point_is_skipped_by_a_rerun(tmp_path: Path) -> None:
    choices = {
        status: already_done(_run_dir(tmp_path, status or "none", status))
        for status in ("completed", "failed", "preempted", "interrupted", "stalled", "running",
                       "submitted", None)
    }  # fmt: skip
    assert choices == {s: s == "completed" for s in choices}
    assert not already_done(tmp_path / "never-created")


def test_final_metrics_are_the_last_row_without_empty_columns(tmp_path: Path) -> None:
    run_dir = _run_dir(tmp_path, "p", "completed", "epoch,loss,acc\n1,0.9,\n2,0.5,\n")
    assert final_metrics(run_dir) == {"epoch": "2", "loss": "0.5"}
    assert final_metrics(tmp_path) == {}


ROWS = [
    SweepRow(Point((("lr", "0.1"), ("bs", "32")), 0), "completed", "healthy",
             {"epoch": "2", "loss": "0.5"}, "", "/s/lr=0.1,bs=32", "101_0"),
    SweepRow(Point((("lr", "0.2"), ("bs", "32")), 1), "failed", "unhealthy", {},
             "rank-crashed: a rank raised an exception (" + "x" * 200 + ")", "/s/lr=0.2,bs=32"),
]  # fmt: skip


def test_csv_has_a_column_per_param_and_metric_the_chosen_metric_first() -> None:
    rows = list(csv.DictReader(io.StringIO(rows_csv(ROWS, metric="loss"))))
    header = rows_csv(ROWS, metric="loss").splitlines()[0].split(",")
    assert header == ["point", "lr", "bs", "status", "verify", "loss", "epoch", "cause",
                      "run_dir", "job_id"]  # fmt: skip
    assert rows[0]["lr"] == "0.1" and rows[0]["loss"] == "0.5" and rows[0]["job_id"] == "101_0"
    assert rows[1]["status"] == "failed" and rows[1]["cause"].startswith("rank-crashed: ")
    assert rows[1]["loss"] == ""


def test_the_table_is_one_line_per_point_with_the_cause_cut_short() -> None:
    lines = rows_text(ROWS, metric="loss").splitlines()
    assert lines[0].split() == ["point", "status", "verify", "loss", "epoch", "cause"]
    assert lines[1].split() == ["lr=0.1,bs=32", "completed", "healthy", "0.5", "2"]
    assert "failed" in lines[2] and "rank-crashed: a rank raised" in lines[2]
    assert len(lines) == 3 and lines[2].endswith("…") and len(lines[2]) < 200


def test_a_point_past_its_timeout_gets_sigterm_first(tmp_path: Path) -> None:
    import sys

    from noderun.sweep.runner import TIMED_OUT, PointJob, run_jobs

    # a launcher stops its ranks on SIGTERM; a SIGKILL would leave them behind
    code = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *a: (print('stopping ranks', flush=True), "
        "sys.exit(143)))\n"
        "print('started', flush=True)\n"
        "time.sleep(60)\n"
    )
    job = PointJob("p", (sys.executable, "-c", code), tmp_path / "p", tmp_path / "p.log")
    assert run_jobs([job], 1, timeout=3.0) == {"p": TIMED_OUT}  # room for a loaded machine
    assert (tmp_path / "p.log").read_text() == "started\nstopping ranks\n"
