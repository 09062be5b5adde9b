"""metrics.csv rows, resume truncation, TensorBoard on demand, the rank-0 progress bar."""

from __future__ import annotations

import io
import sys
import time
from pathlib import Path

import pytest

import noderun
from noderun.errors import UsageError
from noderun.runtime.metrics import COLUMNS, EpochTimer, MetricsLogger, read_metrics
from noderun.runtime.progress import EpochProgress


def test_rows_columns_and_resume_truncation(tmp_path: Path) -> None:
    path = tmp_path / "metrics.csv"
    log = MetricsLogger(path, True, ["val_accuracy"])
    for epoch in (1, 2, 3):
        log.log(epoch=epoch, train_loss=1.0 / epoch, val_accuracy=0.5)
    with pytest.raises(ValueError, match="unknown metrics columns"):
        log.log(epoch=4, accuracy=1.0)
    assert [r["epoch"] for r in read_metrics(path)] == ["1", "2", "3"]
    # a run resumed from the epoch-2 checkpoint writes epoch 3 again: the old row goes
    MetricsLogger(path, True, ["val_accuracy"], resume_after_epoch=2).log(epoch=3, train_loss=0.1)
    rows = read_metrics(path)
    assert [r["epoch"] for r in rows] == ["1", "2", "3"] and rows[-1]["train_loss"] == "0.1"
    assert tuple(rows[0])[: len(COLUMNS)] == COLUMNS and rows[-1]["val_accuracy"] == ""
    MetricsLogger(tmp_path / "other.csv", False).log(epoch=1)
    assert not (tmp_path / "other.csv").exists()  # only the main rank writes


def test_timer_splits_data_and_compute(tmp_path: Path) -> None:
    ctx = noderun.init(run_dir=tmp_path, environ={})

    def slow_batches() -> object:
        for _ in range(3):
            time.sleep(0.05)
            yield [0] * 4

    timer = EpochTimer()
    for batch in timer.iterate(slow_batches()):
        time.sleep(0.02)
        timer.count(len(batch))
    row = timer.reduced(ctx, train_loss=0.5)
    assert row["data_load_time_sec"] >= 0.15 and row["compute_time_sec"] >= 0.06
    assert row["epoch_time_sec"] == pytest.approx(
        row["data_load_time_sec"] + row["compute_time_sec"]
    )
    assert row["throughput_samples_per_sec"] == pytest.approx(12 / row["epoch_time_sec"])
    assert row["train_loss"] == 0.5 and "gpu_util_avg" not in row  # no GPU: left empty


def test_tensorboard_missing_is_a_usage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # import fails
    with pytest.raises(UsageError, match=r"pip install 'noderun\[tensorboard\]'"):
        MetricsLogger(tmp_path / "metrics.csv", True, tensorboard=True)


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bar_only_on_rank_0_terminals() -> None:
    piped = io.StringIO()
    assert list(EpochProgress(True, piped).track(range(5), 5, "epoch 1")) == list(range(5))
    assert piped.getvalue() == ""  # logs get the per-epoch line only
    terminal = _Terminal()
    assert list(EpochProgress(True, terminal).track(range(5), 5, "epoch 1")) == list(range(5))
    assert "epoch 1" in terminal.getvalue()
    other_rank = _Terminal()
    list(EpochProgress(False, other_rank).track(range(5), 5, "epoch 1"))
    assert other_rank.getvalue() == ""
