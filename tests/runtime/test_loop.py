"""TrainingLoop: epochs, steps, running means, metrics rows, checkpoints and resume (1 rank)."""

from __future__ import annotations

import csv
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from noderun import checkpoint
from noderun.errors import UsageError
from noderun.runtime.context import Context, init
from noderun.runtime.loop import MIN_SEC_ENV, TrainingLoop


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
    with TrainingLoop(ctx, model, optimizer, checkpoint_every=2, checkpoint_min_sec=0) as loop:
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


def _quick_epochs(loop: TrainingLoop, total: int, fail_after: int = 0) -> None:
    for epoch in loop.epochs(total):
        for batch in loop.steps([1.0, 2.0]):
            loop.log(1, train_loss=batch)
        loop.end_epoch()
        if epoch == fail_after:
            raise ValueError("the user's script failed")


def _tags(ctx: Context) -> list[str]:
    return [p.name for p in checkpoint.checkpoints(ctx.run_dir / "checkpoints")]


def _wait_for_tags(ctx: Context, expected: list[str]) -> None:
    deadline = time.monotonic() + 10
    while _tags(ctx) != expected and time.monotonic() < deadline:
        time.sleep(0.02)
    assert _tags(ctx) == expected


def test_quick_epochs_are_written_once_per_min_sec_and_the_last_at_close(ctx: Context) -> None:
    model, optimizer = _model()
    with TrainingLoop(ctx, model, optimizer, keep=0, checkpoint_min_sec=30) as loop:
        _quick_epochs(loop, 4)
        _wait_for_tags(ctx, ["epoch-0001"])  # written at once: the first
        time.sleep(0.3)
        assert _tags(ctx) == ["epoch-0001"]  # 2 and 3 gave way to a newer one, 4 waits
    assert _tags(ctx) == ["epoch-0001", "epoch-0004"]
    assert len(_rows(ctx)) == 4  # every epoch still has its metrics row
    again, optimizer = _model()
    with TrainingLoop(ctx, again, optimizer, resume="auto") as loop:
        assert loop.start.epoch == 4 and torch.equal(again.weight, model.weight)


def test_a_waiting_checkpoint_is_written_when_its_turn_comes(ctx: Context) -> None:
    model, optimizer = _model()
    with TrainingLoop(ctx, model, optimizer, keep=0, checkpoint_min_sec=0.4) as loop:
        began = time.monotonic()
        _quick_epochs(loop, 2)
        _wait_for_tags(ctx, ["epoch-0001"])
        _wait_for_tags(ctx, ["epoch-0001", "epoch-0002"])  # nothing else saves: its own turn
        assert time.monotonic() - began >= 0.4


def test_an_exception_still_writes_the_newest_checkpoint(ctx: Context) -> None:
    model, optimizer = _model()
    with (
        pytest.raises(ValueError, match="script failed"),
        TrainingLoop(ctx, model, optimizer, keep=0, checkpoint_min_sec=30) as loop,
    ):
        _quick_epochs(loop, 5, fail_after=3)
    assert _tags(ctx) == ["epoch-0001", "epoch-0003"]


def test_min_sec_zero_from_the_environment_writes_every_epoch(
    ctx: Context, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(MIN_SEC_ENV, "0")
    model, optimizer = _model()
    with TrainingLoop(ctx, model, optimizer, keep=0) as loop:
        _quick_epochs(loop, 3)
    assert _tags(ctx) == ["epoch-0001", "epoch-0002", "epoch-0003"]


@pytest.mark.parametrize("raw", ["soon", "-1", "nan"])
def test_a_bad_min_sec_in_the_environment_is_one_clear_error(
    ctx: Context, monkeypatch: pytest.MonkeyPatch, raw: str
) -> None:
    monkeypatch.setenv(MIN_SEC_ENV, raw)
    model, optimizer = _model()
    with pytest.raises(UsageError, match=f"{MIN_SEC_ENV}=.* is not a number of seconds"):
        TrainingLoop(ctx, model, optimizer)
    assert not (ctx.run_dir / "checkpoints").exists()


def test_end_epoch_before_steps_is_a_clear_error(ctx: Context) -> None:
    model, optimizer = _model()
    with TrainingLoop(ctx, model, optimizer) as loop:
        next(loop.epochs(1))
        with pytest.raises(RuntimeError, match="before steps"):
            loop.end_epoch()


def test_step_mode_evaluates_first_every_n_steps_and_last_outside_the_step_time(
    ctx: Context,
) -> None:
    model, optimizer = _model()
    calls: list[tuple[int, bool]] = []

    def evaluate() -> dict[str, float]:
        calls.append((loop.global_step, model.training))
        model.eval()
        time.sleep(0.2)  # not training: kept out of step_time_sec
        return {"val_loss": 10.0 + loop.global_step}

    loop = TrainingLoop(
        ctx, model, optimizer, max_steps=5, log_every=2, evaluate=evaluate, eval_every=2
    )
    with loop:
        returned = []
        for batch in loop.iterate([1.0, 2.0, 3.0]):
            assert model.training  # evaluate's eval() undone
            returned.append(loop.end_step(samples=2, tokens=8, train_loss=batch))
    assert [step for step, _ in calls] == [0, 2, 4, 5]  # before step 1, every 2nd, the last
    assert [r is not None for r in returned] == [False, True, False, True, True]
    rows = {int(r["step"]): r for r in _rows(ctx)}
    assert sorted(rows) == [0, 2, 4, 5]
    assert rows[0]["train_loss"] == "" and float(rows[0]["val_loss"]) == 10.0
    assert [float(rows[s]["val_loss"]) for s in (2, 4, 5)] == [12.0, 14.0, 15.0]
    assert [float(rows[s]["train_loss"]) for s in (2, 4, 5)] == [
        1.5,
        2.0,
        2.0,
    ]  # 1,2 | 3,1 (a second pass) | 2
    for step in (2, 4, 5):
        assert 0 < float(rows[step]["step_time_sec"]) < 0.1, rows[step]
        tokens, samples = float(rows[step]["tokens_per_sec"]), float(rows[step]["samples_per_sec"])
        assert tokens == pytest.approx(4 * samples, rel=1e-4)  # 6 digits in the file


def test_step_mode_state_is_checkpointed_and_a_positioned_stream_is_not_skipped(
    ctx: Context,
) -> None:
    model, optimizer = _model()

    def stream(state: dict[str, int]) -> Iterator[int]:
        while True:  # the script keeps its data position in the loop's state
            state["seen"] = state.get("seen", 0) + 1
            yield state["seen"]

    with TrainingLoop(ctx, model, optimizer, max_steps=4, checkpoint_every=2) as loop:
        assert loop.state == {}
        taken = [batch for batch in loop.iterate(stream(loop.state), skip_trained=False)]
    assert taken == [1, 2, 3, 4]
    saved = ctx.run_dir / "checkpoints" / "step-00000002"
    assert checkpoint.load(saved)["extra"][0]["seen"] == 2

    again, optimizer = _model()
    evaluated: list[int] = []
    with TrainingLoop(
        ctx,
        again,
        optimizer,
        resume=str(saved),
        max_steps=4,
        evaluate=lambda: evaluated.append(1) or {"val_loss": 1.0},
    ) as loop:
        assert loop.state == {"seen": 2}
        taken = [batch for batch in loop.iterate(stream(loop.state), skip_trained=False)]
    assert taken == [3, 4] and loop.global_step == 4
    assert len(evaluated) == 2  # the restored model first, then the last step
    assert [r["step"] for r in _rows(ctx)] == ["1", "2", "3", "4"]  # no second row 0


def test_evaluate_needs_the_step_mode_and_eval_every_is_checked(ctx: Context) -> None:
    model, optimizer = _model()
    with pytest.raises(UsageError, match="step mode"):
        TrainingLoop(ctx, model, optimizer, evaluate=dict)
    with pytest.raises(UsageError, match="eval_every=-1"):
        TrainingLoop(ctx, model, optimizer, max_steps=2, eval_every=-1)
