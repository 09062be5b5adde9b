"""Checkpoints that cannot be written are said at once and lose nothing; a corrupt newest one
gives way to the previous complete one; pacing is decided on the training thread.

Seen failing before: with a full filesystem the commit failed in a background thread without a
word and training went on (issue 29); ``--resume auto`` of a truncated newest checkpoint stopped
with "is corrupt" although a good one lay beside it."""

from __future__ import annotations

import errno
import os
import shutil
import time
from concurrent import futures
from pathlib import Path

import pytest
import torch
from torch import nn

import noderun
from noderun.runtime import checkpoint, write_errors
from noderun.runtime.training_state import Checkpointer, Position


def _setup(run_dir: Path, **kwargs: object) -> tuple[nn.Module, Checkpointer]:
    ctx = noderun.init(run_dir=run_dir, environ={})
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    return model, Checkpointer(ctx, model, torch.optim.SGD(model.parameters(), 0.1), **kwargs)  # type: ignore[arg-type]


def _full_disk(*_: object, **__: object) -> None:
    raise OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.parametrize("big", [False, True])  # committed in the background / serialized here
def test_a_failed_write_is_said_with_path_and_room_and_stops_training(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], big: bool
) -> None:
    if big:
        monkeypatch.setattr(checkpoint, "SNAPSHOT_BYTES", 4)
    _, ckpt = _setup(tmp_path)
    ckpt.save(Position(1, 0, 1), wait=True)
    monkeypatch.setattr(torch, "save", _full_disk)
    with pytest.raises(write_errors.WriteError) as raised:
        ckpt.save(Position(2, 0, 2))
        ckpt.wait()  # a background failure surfaces here at the latest
    line = str(raised.value)
    assert "\n" not in line and raised.value.exit_code != 0
    assert f"checkpoint {tmp_path / 'checkpoints' / 'epoch-0002'} could not be written" in line
    assert "[Errno 28] No space left on device" in line and " free there)" in line
    assert "NODERUN_ON_WRITE_ERROR=warn" in line
    assert "noderun: error: rank 0: checkpoint" in capsys.readouterr().err  # said on the console
    monkeypatch.undo()
    assert checkpoint.latest(tmp_path / "checkpoints") == tmp_path / "checkpoints" / "epoch-0001"
    assert checkpoint.read_full(tmp_path / "checkpoints" / "epoch-0001")["position"]["epoch"] == 1
    assert not list((tmp_path / "checkpoints").glob(".*.tmp"))  # the room was given back


FAILURES = {  # errno -> what the hint must say about it
    errno.ENOSPC: "free space",
    errno.EDQUOT: "quota",
    errno.EIO: "dmesg",
    errno.EACCES: "writable",
}


@pytest.mark.parametrize("code", list(FAILURES), ids=[errno.errorcode[c] for c in FAILURES])
def test_each_failed_write_names_its_errno_and_fix_and_keeps_the_last_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    """EDQUOT, EIO and EACCES as ENOSPC (as root a real EACCES cannot be made): the errno and
    its own fix in one line, the previous checkpoint loadable, nothing partial left."""
    _, ckpt = _setup(tmp_path)
    ckpt.save(Position(1, 0, 1), wait=True)

    def fails(*_: object, **__: object) -> None:
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(torch, "save", fails)
    with pytest.raises(write_errors.WriteError) as raised:
        ckpt.save(Position(2, 0, 2), wait=True)
    line = str(raised.value)
    assert f"[Errno {code}] {os.strerror(code)}" in line and FAILURES[code] in line, line
    monkeypatch.undo()
    newest = checkpoint.latest(tmp_path / "checkpoints")
    assert newest == tmp_path / "checkpoints" / "epoch-0001"
    assert checkpoint.read_full(newest)["position"]["epoch"] == 1
    assert not list((tmp_path / "checkpoints").glob(".*.tmp"))


@pytest.mark.parametrize("code", [errno.EIO, errno.EACCES, errno.ENOENT])
def test_a_metrics_row_failing_otherwise_is_said_and_stops(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], code: int
) -> None:
    """metrics.csv's write failing with EIO or EACCES (patched), or its folder removed (real)."""
    from noderun.runtime.metrics import MetricsLogger

    path = tmp_path / "run" / "metrics.csv"
    log = MetricsLogger(path)
    log.log(epoch=1, train_loss=0.5)
    if code == errno.ENOENT:
        shutil.rmtree(path.parent)
    else:
        real_open = open

        def failing_open(file: object, mode: str = "r", *args: object, **kwargs: object) -> object:
            if file == path and "a" in mode:
                raise OSError(code, os.strerror(code), str(path))
            return real_open(file, mode, *args, **kwargs)  # type: ignore[call-overload]

        monkeypatch.setattr("builtins.open", failing_open)
    with pytest.raises(write_errors.WriteError, match=rf"metrics.csv \S+ could not be written: "
                       rf"\[Errno {code}\]"):  # fmt: skip
        log.log(epoch=2, train_loss=0.4)
    assert f"noderun: error: metrics.csv {path}" in capsys.readouterr().err
    monkeypatch.undo()
    if code != errno.ENOENT:
        assert path.read_text().count("\n") == 2  # the header and row 1, nothing half-written


def test_warn_keeps_training_with_one_warning_per_failed_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(write_errors.ON_ERROR_ENV, "warn")
    _, ckpt = _setup(tmp_path)
    monkeypatch.setattr(checkpoint, "commit", _full_disk)
    for epoch in (1, 2):
        ckpt.save(Position(epoch, 0, epoch), wait=True)
    warnings = [ln for ln in capsys.readouterr().err.splitlines() if "could not be written" in ln]
    assert len(warnings) == 2 and all(w.startswith("noderun: warning: ") for w in warnings)
    assert checkpoint.latest(tmp_path / "checkpoints") is None


def test_a_vanished_checkpoint_directory_is_a_write_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, ckpt = _setup(tmp_path)
    monkeypatch.setattr(checkpoint, "start", lambda d, t: shutil.rmtree(d) or d / f".{t}.tmp")
    with pytest.raises(write_errors.WriteError, match=r"could not be written: \[Errno 2\]"):
        ckpt.save(Position(1, 0, 1), wait=True)


def test_paced_checkpoints_wait_for_their_turn_and_the_newest_wins(tmp_path: Path) -> None:
    _, ckpt = _setup(tmp_path, min_commit_sec=30)
    directory = tmp_path / "checkpoints"
    ckpt.save(Position(1, 0, 1))
    ckpt._worker.drain()
    assert checkpoint.checkpoints(directory) == [directory / "epoch-0001"]  # its turn at once
    ckpt.save(Position(2, 0, 2))
    ckpt.save(Position(3, 0, 3))  # epoch 2's was waiting for its turn: taken back, never written
    time.sleep(0.3)
    assert checkpoint.checkpoints(directory) == [directory / "epoch-0001"]  # 30 s not over
    assert not list(directory.glob(".*.tmp"))
    ckpt.wait()  # close, preemption, an exception: the newest is written at once
    assert checkpoint.checkpoints(directory) == [directory / "epoch-0001", directory / "epoch-0003"]


def test_resume_auto_falls_back_from_a_corrupt_newest_checkpoint_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model, ckpt = _setup(tmp_path)
    ckpt.save(Position(1, 0, 1), wait=True)
    good = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        model.weight.add_(1)
    newest = ckpt.save(Position(2, 0, 2), wait=True)
    state = newest / checkpoint.STATE_FILE
    state.write_bytes(state.read_bytes()[: state.stat().st_size // 2])  # truncated, still marked
    assert checkpoint.latest(tmp_path / "checkpoints") == newest
    model2, again = _setup(tmp_path)
    with torch.no_grad():
        model2.weight.zero_()
    position = again.resume("auto")
    assert position.epoch == 1 and again.resumed_from == tmp_path / "checkpoints" / "epoch-0001"
    assert torch.equal(model2.weight, good["weight"])
    said = [ln for ln in capsys.readouterr().out.splitlines() if "previous complete" in ln]
    assert len(said) == 1 and "epoch-0002/state.pt is corrupt" in said[0]
    with pytest.raises(noderun.UsageError, match="is corrupt"):
        again.resume(newest)  # named explicitly: never replaced by another


def test_a_really_full_filesystem_stops_training_and_keeps_the_last_good_checkpoint(
    tiny_fs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ctx = noderun.init(run_dir=tiny_fs, environ={})
    model = nn.Linear(120, 120)  # ~57 KiB of weights, ~115 KiB with SGD momentum
    optimizer = torch.optim.SGD(model.parameters(), 0.1, momentum=0.9)
    model(torch.randn(2, 120)).sum().backward()
    optimizer.step()
    ckpt = Checkpointer(ctx, model, optimizer, keep=5)
    with pytest.raises(write_errors.WriteError) as raised:
        for epoch in range(1, 10):
            ckpt.save(Position(epoch, 0, epoch))
        ckpt.wait()
    assert "No space left on device" in str(raised.value), str(raised.value)
    assert "noderun: error: rank 0: checkpoint" in capsys.readouterr().err
    last = checkpoint.latest(tiny_fs / "checkpoints")
    assert last is not None and checkpoint.read_full(last)["position"]["epoch"] >= 1
    ckpt._worker.drain()  # epochs queued behind the failed one fail too: not at exit
    assert os.statvfs(tiny_fs).f_bavail > 0  # the failed one's partial files were removed


def test_a_metrics_row_that_cannot_be_written_is_said_cut_off_and_stops(
    tiny_fs: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from noderun.runtime.metrics import MetricsLogger, read_metrics

    path = tiny_fs / "metrics.csv"
    log = MetricsLogger(path, extra_columns=[f"c{i}" for i in range(40)])
    log.log(epoch=1, train_loss=0.5)
    (tiny_fs / "filler").write_bytes(b"x" * (os.statvfs(tiny_fs).f_bavail * 4096 - 100))
    with pytest.raises(write_errors.WriteError, match=r"metrics.csv \S+ could not be written: "):
        for epoch in range(2, 200):
            log.log(epoch=epoch, train_loss=0.5, **{f"c{i}": 1.0 * i for i in range(40)})
    assert "No space left on device" in capsys.readouterr().err
    rows = read_metrics(path)  # whole rows only
    assert rows[0]["epoch"] == "1" and all(len(r) == len(log.columns) for r in rows)
    monkeypatch.setenv(write_errors.ON_ERROR_ENV, "warn")
    log.log(epoch=500, train_loss=0.5, **{f"c{i}": 1.0 * i for i in range(40)})  # goes on
    assert "noderun: warning: metrics.csv" in capsys.readouterr().err


def test_a_background_failure_is_said_as_it_happens_and_raised_at_the_next_save(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _, ckpt = _setup(tmp_path)
    monkeypatch.setattr(checkpoint, "commit", _full_disk)
    ckpt.save(Position(1, 0, 1))  # returns before the commit runs
    futures.wait([f for _, f in ckpt._worker._open])  # it ran and failed; nobody looked yet
    said = capsys.readouterr().err
    assert said.count("could not be written") == 1 and "epoch-0001" in said
    with pytest.raises(write_errors.WriteError, match="epoch-0001"):
        ckpt.save(Position(2, 0, 2))
    assert "could not be written" not in capsys.readouterr().err  # said once, not twice
