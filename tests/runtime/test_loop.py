"""TrainingLoop: epochs, steps, running means, metrics rows, checkpoints and resume (1 rank)."""

from __future__ import annotations

import csv
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from noderun import checkpoint
from noderun.runtime.context import Context, init
from noderun.runtime.loop import TrainingLoop


@pytest.fixture
def ctx(tmp_path: Path) -> Iterator[Context]:
    with init(run_dir=tmp_path / "run", environ={}) as context:
        yield context


def _model() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = torch.nn.Linear(2, 1)
    return model, torch.optim.SGD(model.parameters(), lr=0.1)


def _rows(ctx: Context) -> list[dict[str, str]]:
    with open(ctx.run_dir / "metrics.csv", newline="") as handle:
        return list(csv.DictReader(handle))


def test_two_epochs_write_mean_rows_and_a_checkpoint_each(ctx: Context) -> None:
    model, optimizer = _model()
    seen = []
    with TrainingLoop(ctx, model, optimizer, metrics=["val_score"]) as loop:
        for epoch in loop.epochs(2):
            for batch in loop.steps([1.0, 2.0, 6.0]):
                seen.append((epoch, loop.step, batch))
                loop.log(4, train_loss=batch * epoch)
            row = loop.end_epoch(val_score=10.0 * epoch)
            assert row["train_loss"] == pytest.approx(3.0 * epoch)
    assert [s[:2] for s in seen] == [(1, 1), (1, 2), (1, 3), (2, 1), (2, 2), (2, 3)]
    assert loop.global_step == 6
    rows = _rows(ctx)
    assert [float(r["train_loss"]) for r in rows] == [3.0, 6.0]
    assert [float(r["val_score"]) for r in rows] == [10.0, 20.0]
    assert all(float(r["throughput_samples_per_sec"]) > 0 for r in rows)
    for tag in ("epoch-0001", "epoch-0002"):
        assert checkpoint.is_complete(ctx.run_dir / "checkpoints" / tag)


def test_resume_auto_skips_done_epochs_and_mid_epoch_batches(ctx: Context) -> None:
    model, optimizer = _model()
    with TrainingLoop(ctx, model, optimizer, checkpoint_every=2) as loop:
        for _ in loop.epochs(3):
            for batch in loop.steps([1.0, 2.0, 3.0, 4.0, 5.0]):
                loop.log(1, train_loss=batch)
            loop.end_epoch()
            break  # "crash" after epoch 1: its checkpoint and a step-2 one of it exist
    directory = ctx.run_dir / "checkpoints"
    assert checkpoint.is_complete(directory / "epoch-0001")
    assert checkpoint.is_complete(directory / "epoch-0000-step-000004")
    again, optimizer = _model()
    with TrainingLoop(ctx, again, optimizer, resume="auto") as loop:
        assert list(loop.epochs(3)) == [2, 3]
        assert torch.equal(again.weight, model.weight)  # the trained weights came back

    # resumed inside epoch 1 at step 4: only batch 5 is left, the means carry over
    third, optimizer = _model()
    mid = directory / "epoch-0000-step-000004"
    with TrainingLoop(ctx, third, optimizer, resume=str(mid)) as loop:
        epochs = loop.epochs(1)
        assert next(epochs) == 1
        left = list(loop.steps([1.0, 2.0, 3.0, 4.0, 5.0]))
        for batch in left:
            loop.log(1, train_loss=batch)
        row = loop.end_epoch()
    assert left == [5.0]
    assert row["train_loss"] == pytest.approx(3.0)  # (1+2+3+4) saved, 5 now: mean of 1..5


def test_end_epoch_before_steps_is_a_clear_error(ctx: Context) -> None:
    model, optimizer = _model()
    with TrainingLoop(ctx, model, optimizer) as loop:
        next(loop.epochs(1))
        with pytest.raises(RuntimeError, match="before steps"):
            loop.end_epoch()
