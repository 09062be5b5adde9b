"""The step profiler in one process: window, phases adding up, hooks gone afterwards."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from torch.optim.optimizer import _global_optimizer_pre_hooks

from noderun.plan.profile import PHASES
from noderun.runtime import profiling
from noderun.verify.profile_report import load_profiles, render, write_breakdown


class SlowBatches:
    """Four batches, each taking ``delay`` seconds to arrive."""

    def __init__(self, delay: float) -> None:
        self.delay = delay

    def __iter__(self) -> Iterator[torch.Tensor]:
        for _ in range(4):
            time.sleep(self.delay)
            yield torch.randn(8, 4)


def train(epochs: int, gap: float = 0.0) -> torch.nn.Module:
    model = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    profiling.watch(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(epochs):
        for batch in profiling.profile_batches(SlowBatches(0.01)):
            optimizer.zero_grad()
            model(batch).pow(2).mean().backward()
            optimizer.step()
            with profiling.phase("checkpoint"):
                time.sleep(0.005)
        time.sleep(gap)  # evaluation, the epoch's checkpoint: between steps
    return model


@pytest.fixture(autouse=True)
def no_profiler_left() -> Iterator[None]:
    yield
    if profiling.current() is not None:
        profiling.current().finish()  # type: ignore[union-attr]


def test_window_phases_and_hooks(tmp_path: Path) -> None:
    profiling.install(0, tmp_path, {"NODERUN_PROFILE": "steps=3:6,ranks=0"}, cuda=False)
    assert _global_optimizer_pre_hooks
    model = train(epochs=3, gap=0.03)
    assert profiling.current() is None  # the window closed at step 7's fetch
    assert not _global_optimizer_pre_hooks and not model._forward_pre_hooks
    record = json.loads((tmp_path / "profile" / "rank0.json").read_text())
    assert [s["step"] for s in record["steps"]] == [3, 4, 5, 6]
    for step in record["steps"]:
        assert set(step["phases"]) == set(PHASES)
        assert sum(step["phases"].values()) == pytest.approx(step["seconds"], rel=0.01)
        assert step["phases"]["data"] >= 0.01  # the loader's sleep
        assert step["phases"]["checkpoint"] >= 0.005
        for phase in ("forward", "backward", "optimizer"):
            assert step["phases"][phase] > 0
    # step 4 ends epoch 1: the 30 ms after it are between steps, not in step 4 or 5
    assert record["between_steps"]["seconds"] >= 0.03
    assert max(s["seconds"] for s in record["steps"]) < 0.03 + 0.01 + 0.005
    assert (tmp_path / "profile" / record["trace"]).stat().st_size > 0
    assert not record["ended_before_window"]


def test_table_rows_come_from_the_rank_files(tmp_path: Path) -> None:
    profiling.install(0, tmp_path, {"NODERUN_PROFILE": "steps=2:3,trace=0"}, cuda=False)
    train(epochs=1)
    [prof] = load_profiles(tmp_path)
    assert prof.steps == (2, 3) and prof.trace is None
    assert sum(prof.phases.values()) == pytest.approx(prof.step_seconds, rel=0.01)
    table = render([prof])
    assert f"| 0 | {prof.host} | 2-3 | {prof.step_seconds * 1e3:.2f} |" in table
    path = write_breakdown(tmp_path)
    assert path is not None and path.read_text() == table


def test_a_run_shorter_than_the_window_says_so(tmp_path: Path) -> None:
    profiling.install(0, tmp_path, {"NODERUN_PROFILE": "steps=3:20,trace=0"}, cuda=False)
    train(epochs=1)
    profiler = profiling.current()
    assert profiler is not None
    profiler.finish(ended_early=True)  # what ctx.shutdown does
    [prof] = load_profiles(tmp_path)
    assert prof.steps == (3, 4)  # the fetch that found the loader empty closed step 4
    assert prof.ended_before_window
    assert "ended before the window" in render([prof])


def test_other_ranks_and_off_install_nothing(tmp_path: Path) -> None:
    profiling.install(1, tmp_path, {"NODERUN_PROFILE": "ranks=0"}, cuda=False)
    assert profiling.current() is None
    profiling.install(0, tmp_path, {}, cuda=False)
    assert profiling.current() is None
    batches = [1, 2]
    assert profiling.profile_batches(batches) is batches  # untouched when off
    assert not (tmp_path / "profile").exists()
