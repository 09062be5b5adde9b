"""TrainingLoop's step mode (max_steps) through `noderun run --nproc-per-node 2`: checkpoints
as Position(global_step=n), metrics.csv with STEP_COLUMNS, and a run stopped after a checkpoint
and resumed ends bit-identical to an uninterrupted one."""

from __future__ import annotations

import csv
import subprocess
from pathlib import Path

import pytest

from noderun import checkpoint
from noderun.exit_codes import EXIT_PREEMPTED
from noderun.runtime.metrics import STEP_COLUMNS
from tests.conftest import ROOT, noderun, run_args
from tests.runtime.test_resume import assert_identical, flat

SCRIPT = ROOT / "tests" / "scripts" / "step_trainer.py"


def run(run_dir: Path, *extra: str, **env: str) -> subprocess.CompletedProcess[str]:
    return noderun([*run_args(SCRIPT, run_dir, nnodes=1, nproc=2), *extra], timeout=240, **env)


def final(run_dir: Path) -> dict[str, object]:
    last = checkpoint.latest(run_dir / "checkpoints")
    assert last is not None and last.name == "step-00000012", last
    state = checkpoint.load(last)
    return dict(flat({k: state[k] for k in ("model", "optimizer")}))


def rows(run_dir: Path) -> list[dict[str, str]]:
    with open(run_dir / "metrics.csv", newline="") as handle:
        return list(csv.DictReader(handle))


@pytest.mark.slow
def test_step_mode_stopped_and_resumed_is_bit_identical(tmp_path: Path) -> None:
    reference = tmp_path / "uninterrupted"
    result = run(reference)
    assert result.returncode == 0, result.stderr[-3000:]
    names = [p.name for p in checkpoint.checkpoints(reference / "checkpoints")]
    assert names == ["step-00000004", "step-00000008", "step-00000012"]
    logged = rows(reference)
    assert list(logged[0])[: len(STEP_COLUMNS)] == list(STEP_COLUMNS)
    assert [r["step"] for r in logged] == ["2", "4", "6", "8", "10", "12"]
    assert all(float(r["samples_per_sec"]) > 0 for r in logged)
    header = (reference / "metrics.csv").read_text().splitlines()[0].split(",")
    assert len(header) == len(set(header)), header

    # rank 1 raises the preemption flag at its 6th step: both ranks stop after step 7, the
    # checkpoint step-00000007 is written, exit 75 (a mid-pass stop: pass 2, batch 2)
    stopped = tmp_path / "stopped"
    result = run(stopped, NODERUN_DEBUG_PREEMPT_AT="1:6", NODERUN_PREEMPT_CHECK_SEC="0")
    assert result.returncode == EXIT_PREEMPTED, result.stderr[-3000:]
    saved = checkpoint.latest(stopped / "checkpoints")
    assert saved is not None and saved.name == "step-00000007"

    resumed = tmp_path / "resumed"
    result = run(resumed, "--resume", str(saved))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "global step 7)" in result.stdout
    assert_identical(final(reference), final(resumed))
    # the rows it wrote (steps 8..12, the window of step 8 carried over) match the reference's
    theirs = {r["step"]: r["train_loss"] for r in logged}
    ours = rows(resumed)
    assert [r["step"] for r in ours] == ["8", "10", "12"]
    assert all(r["train_loss"] == theirs[r["step"]] for r in ours)


def test_iterate_without_max_steps_is_a_usage_error(tmp_path: Path) -> None:
    import torch

    from noderun.errors import UsageError
    from noderun.runtime.context import init
    from noderun.runtime.loop import TrainingLoop

    with init(run_dir=tmp_path / "run", environ={}) as ctx:
        model = torch.nn.Linear(2, 1)
        with TrainingLoop(ctx, model) as loop, pytest.raises(UsageError, match="max_steps=N"):
            next(loop.iterate([1, 2]))
        with pytest.raises(UsageError, match="out of range"):
            TrainingLoop(ctx, model, max_steps=3, log_every=0)
