"""What ls/status/logs/cancel decide without I/O (run_view), and their bad input: one line,
exit 2, nothing signalled."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from noderun import cancel_request, cli, run_view
from noderun.backends.supervise import cancelled
from noderun.exit_codes import EXIT_PREEMPTED
from noderun.outcome import Outcome, restart_refusal


@pytest.mark.parametrize(
    ("recorded", "launcher", "job", "stalled", "shown"),
    [
        ("completed", "gone", None, False, "completed"),
        ("cancelled", "gone", None, False, "cancelled"),
        ("running", "alive", None, False, "running"),
        ("running", "alive", None, True, "stalled"),
        ("running", "dead", None, False, "launcher died"),
        ("submitted", "gone", "pending", False, "pending"),
        ("submitted", "gone", "running", False, "running"),
        ("running", "gone", "running", False, "running"),  # a node's lock: SLURM knows better
        ("running", "gone", "cancelled", False, "cancelled"),  # scancel before run.json ended
        ("running", "gone", "timeout", False, "timeout"),
        ("preempted", "gone", "pending", False, "requeued"),
        ("failed", "gone", None, False, "failed"),
    ],
)
def test_run_status(
    recorded: str, launcher: str, job: str | None, stalled: bool, shown: str
) -> None:
    assert run_view.run_status(recorded, launcher, job, stalled) == shown


def test_stalled_only_when_the_report_is_newer_than_the_last_sign_of_life() -> None:
    assert not run_view.is_stalled(None, 100.0)
    assert run_view.is_stalled(120.0, 100.0)
    assert not run_view.is_stalled(90.0, 100.0)
    assert run_view.is_stalled(90.0, None)


@pytest.mark.parametrize(
    ("text", "back"),
    [("90s", 90), ("10m", 600), ("1h30m", 5400), ("2d", 172800), ("1.5h", 5400), ("0s", 0)],
)
def test_since_durations(text: str, back: float) -> None:
    assert run_view.parse_since(text, now=1_000_000.0) == 1_000_000.0 - back


def test_since_times_and_refusals() -> None:
    assert run_view.parse_since("2026-11-26T03:00", now=0) == run_view.parse_iso(
        "2026-11-26T03:00:00+00:00"
    )
    assert run_view.parse_since("2026-11-26 03:00:00+01:00", now=0) == run_view.parse_iso(
        "2026-11-26T02:00:00+00:00"
    )
    for bad in ("", "yesterday", "10", "5x", "1h-2m"):
        with pytest.raises(ValueError, match="neither a duration"):
            run_view.parse_since(bad, now=0)


def test_lines_since_uses_the_lines_own_times() -> None:
    since = run_view.parse_iso("2026-11-26T03:00:00")
    assert since is not None
    stamped = [
        "2026-11-26 02:59:59,100 INFO old",
        "  continued",
        "2026-11-26 03:00:01,000 INFO new",
        "  traceback line",
    ]
    assert run_view.lines_since(stamped, since) == stamped[2:]
    assert run_view.lines_since(stamped[:2], since) == []
    plain = ["epoch 1", "epoch 2"]
    assert run_view.lines_since(plain, since) == plain  # no time per line: all


def test_formatting() -> None:
    assert [run_view.duration_text(s) for s in (None, 12.4, 185, 3725, 90000)] == [
        "-",
        "12s",
        "3m05s",
        "1h02m",
        "1d01h",
    ]
    row = {"epoch": "3", "train_loss": "0.012345", "val_loss": "0.5", "lr": "0.1", "x": ""}
    assert run_view.metric_text(row) == "epoch 3 train_loss 0.01235 val_loss 0.5"
    assert run_view.metric_text(None) == "-"
    line = run_view.RunLine("runs/a", "a", "slurm", 2, 4, "running", 60.0, 65.0, row, "17")
    assert line.row() == (
        "a",
        "slurm",
        "2x4",
        "running",
        "1970-01-01 00:01",
        "1m05s",
        "epoch 3 train_loss 0.01235 val_loss 0.5",
        "17",
    )
    assert len(line.row()) == len(run_view.LS_COLUMNS)
    older = run_view.RunLine("runs/b", "b", "local", None, None, "failed", None, None, None, None)
    assert run_view.newest_first([older, line]) == [line, older]
    assert older.row()[2] == "-" and older.to_json()["duration_sec"] is None


def test_rank_rows_and_rates() -> None:
    assert run_view.rank_rate(50, 100.0, 110.0) == 5.0
    assert run_view.rank_rate(None, 100.0, 110.0) is None
    assert run_view.rate_between((10.0, 40), (12.0, 50)) == 5.0
    assert run_view.rate_between((10.0, 40), (12.0, 3)) is None  # a new attempt
    assert run_view.rank_host(3, [], ["n1", "n2"], 2) == "n2"
    assert run_view.rank_host(0, ["h0", "h1"], ["n1"], 1) == "h0"
    assert list(run_view.node_ranks(1, 4)) == [4, 5, 6, 7]
    rank = run_view.RankLine(1, "n2", 12, 2.5, 3.0, True)
    assert rank.row() == ("1", "n2", "-", "-", "12", "2.50", "3s ago", "STALLED")
    assert rank.to_json()["progress_per_sec"] == 2.5 and rank.to_json()["step"] is None
    looped = run_view.RankLine(0, "n1", 30, 3.0, 1.0, False, step=412, epoch=2, steps_per_sec=7.5)
    assert looped.row()[2:4] == ("412 (epoch 2)", "7.50")
    assert looped.to_json() | {"step": 412, "epoch": 2, "steps_per_sec": 7.5} == looped.to_json()
    assert len(looped.row()) == len(run_view.RANK_COLUMNS)


def test_a_ranks_training_position_is_read_from_its_progress_file(tmp_path: Path) -> None:
    """What the rank's heartbeat writes (TrainingLoop's step and epoch, the attempt's first
    step and time) is what status reads; the stall watch's counter stays the first 8 bytes."""
    from noderun.runtime import heartbeat
    from noderun.stacks.files import progress_file, read_progress, read_progress_and_position

    def read_position(path: Path) -> object:
        return read_progress_and_position(path)[1]

    run_dir = tmp_path / "run"
    heartbeat._counter = None
    try:
        heartbeat.install(0, {"NODERUN__RUN_DIR": str(run_dir)})
        path = progress_file(run_dir, 0)
        assert read_position(path) is None  # no step yet
        heartbeat.beat()
        heartbeat.position(41, 3)
        assert read_position(path) == files_position(41, 3, None)
        time.sleep(0.05)
        heartbeat.beat()
        heartbeat.position(46, 3)
        seen = read_position(path)
        assert seen is not None and (seen.step, seen.epoch) == (46, 3)
        assert seen.steps_per_sec is not None and 0 < seen.steps_per_sec < 5 / 0.05
        heartbeat.position(47)  # step mode: no epoch
        assert read_position(path).epoch is None  # type: ignore[union-attr]
        assert read_progress(path) == 2
    finally:
        import faulthandler

        faulthandler.unregister(heartbeat.STACK_SIGNAL)
        if heartbeat._stack_file is not None:
            heartbeat._stack_file.close()
        heartbeat._counter, heartbeat._stack_file = None, None


def files_position(step: int, epoch: int | None, rate: float | None) -> object:
    from noderun.stacks.files import Position

    return Position(step, epoch, rate)


def test_a_cancel_request_turns_any_unfinished_end_into_cancelled(tmp_path: Path) -> None:
    preempted = Outcome(duration=1.0, failure="rank 0 exit 75", failure_exit=EXIT_PREEMPTED)
    assert cancelled(preempted, tmp_path) is preempted  # not asked
    cancel_request.request(tmp_path, now=False)
    assert cancel_request.requested(tmp_path) == "graceful"
    ended = cancelled(preempted, tmp_path)
    assert ended.status == "cancelled" and ended.exit_code == EXIT_PREEMPTED
    assert "every rank saved a checkpoint" in ended.final_line(tmp_path)
    assert restart_refusal(ended, None, 0, 3) == "the run cancelled"
    assert cancelled(Outcome(duration=1.0), tmp_path).status == "completed"  # it finished first
    cancel_request.request(tmp_path, now=True)
    stopped = cancelled(Outcome(duration=1.0, interrupted_by="SIGTERM"), tmp_path)
    assert stopped.status == "cancelled" and "at once" in stopped.final_line(tmp_path)
    cancel_request.clear(tmp_path)
    assert cancel_request.requested(tmp_path) is None


def _run_dir(tmp_path: Path, status: str) -> Path:
    run_dir = tmp_path / f"run-{status}"
    (run_dir / "logs").mkdir(parents=True)
    record = {
        "backend": "local",
        "status": status,
        "start_time": "2026-11-26T03:00:00+00:00",
        "duration_sec": 5.0,
        "topology": {"nnodes": 2, "nproc_per_node": 1, "world_size": 2, "master_addr": "x"},
    }
    (run_dir / "run.json").write_text(json.dumps(record))
    (run_dir / "logs" / "rank1.log").write_text("one\ntwo\nthree\n")
    return run_dir


def test_bad_input_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    done = _run_dir(tmp_path, "completed")
    (tmp_path / "not-a-run").mkdir()
    cases = [
        (["cancel", str(done)], "has already ended (completed): there is nothing to cancel"),
        (["status", str(tmp_path / "missing")], "does not exist"),
        (["logs", str(tmp_path / "not-a-run")], "is not a run directory (no run.json)"),
        (["logs", str(done), "--rank", "2"], "--rank 2: the run has ranks 0 to 1"),
        (["logs", str(done), "--node", "2"], "--node 2: the run has nodes 0 to 1"),
        (["logs", str(done), "--grep", "("], "is not a regular expression"),
        (["logs", str(done), "--since", "later"], "is neither a duration"),
        (["ls", str(tmp_path / "missing")], "is not a folder"),
        (["status", "--json", "--watch", str(done)], "--watch"),
    ]
    for argv, said in cases:
        assert cli.main(argv) == 2, argv
        err = capsys.readouterr().err
        assert said in err and "hint:" in err and len(err.strip().splitlines()) == 1, err
    assert not (done / cancel_request.FILE).exists()  # nothing asked of a finished run


def test_ls_and_logs_of_finished_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    done = _run_dir(tmp_path, "completed")
    failed = _run_dir(tmp_path, "failed")
    os.utime(failed / "run.json")
    record = json.loads((failed / "run.json").read_text())
    record["start_time"] = "2026-11-26T04:00:00+00:00"
    (failed / "run.json").write_text(json.dumps(record))
    assert cli.main(["ls", "--json", str(tmp_path)]) == 0
    runs = json.loads(capsys.readouterr().out)["runs"]
    assert [(r["name"], r["status"]) for r in runs] == [
        ("run-failed", "failed"),
        ("run-completed", "completed"),
    ]  # newest first
    assert cli.main(["logs", str(done), "--rank", "1", "--grep", "t"]) == 0
    assert capsys.readouterr().out == "two\nthree\n"
    assert cli.main(["logs", str(done)]) == 0
    assert capsys.readouterr().out == "1| one\n1| two\n1| three\n"
    old = time.time() - 7200
    os.utime(done / "logs" / "rank1.log", (old, old))
    assert cli.main(["logs", str(done), "--since", "1h"]) == 0
    assert capsys.readouterr().out == ""  # not written in the last hour


def test_a_run_whose_launcher_died_is_listed_so_and_cancelled_here(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import socket
    import subprocess

    run_dir = _run_dir(tmp_path, "running")
    gone = subprocess.Popen(["true"])
    gone.wait()  # its pid names no process now: the lock it "left" is stale
    (run_dir / ".noderun.lock").write_text(f"{gone.pid} {socket.gethostname()}\n")
    assert cli.main(["ls", "--json", str(tmp_path)]) == 0
    assert json.loads(capsys.readouterr().out)["runs"][0]["status"] == "launcher died"
    assert cli.main(["cancel", str(run_dir)]) == 0  # nothing runs: run.json made final here
    assert "run.json says cancelled" in capsys.readouterr().out
    assert json.loads((run_dir / "run.json").read_text())["status"] == "cancelled"
    assert not (run_dir / ".noderun.lock").exists()
