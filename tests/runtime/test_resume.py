"""Exact resume and crash safety through `noderun run`, 2 nodes x 1 process, CPU/gloo.

One uninterrupted run of the traffic workload is the reference; a run stopped mid-epoch (the
preemption path, triggered at a fixed step) and resumed, and a run whose rank 0 is SIGKILLed
while it writes a checkpoint and is then resumed, must both end bit-identical to it.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import torch

from noderun import checkpoint
from noderun.errors import UsageError
from noderun.exit_codes import EXIT_PREEMPTED
from noderun.topology.contract import RankContract
from tests.conftest import ROOT, cli, noderun, start_noderun, wait_until

pytestmark = pytest.mark.slow

SCRIPT = str(ROOT / "examples" / "traffic_regression.py")
# 2 sensors x 7 days: 27 steps per epoch at 2 ranks x 64, 3 epochs, ~10 s a run
TWO_NODES = ["run", "--nnodes", "2", "--nproc-per-node", "1"]
SMALL = ["--sensors", "2", "--days", "7", "--epochs", "3", "--batch-size", "64", "--keep", "5"]


def run(run_dir: Path, *extra: str, **env: str) -> subprocess.CompletedProcess[str]:
    argv = [*TWO_NODES, "--run-dir", str(run_dir), SCRIPT, *SMALL, *extra]
    return noderun(argv, timeout=240, **env)


def flat(tree: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(tree, dict):
        for key, value in tree.items():
            yield from flat(value, f"{prefix}/{key}")
    elif isinstance(tree, list | tuple):
        for index, value in enumerate(tree):
            yield from flat(value, f"{prefix}/{index}")
    else:
        yield prefix, tree


def final_state(run_dir: Path) -> dict[str, Any]:
    """Model, optimizer and scheduler of the run's last checkpoint, flattened."""
    final = checkpoint.latest(run_dir / "checkpoints")
    assert final is not None and final.name == "epoch-0003", final
    state = checkpoint.load(final)
    return dict(flat({k: state[k] for k in ("model", "optimizer", "scheduler")}))


def assert_identical(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert a.keys() == b.keys()
    tensors = 0
    for key, value in a.items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(value, b[key]), f"{key} differs"
            tensors += 1
        else:
            assert value == b[key], key
    assert tensors >= 12  # model, AdamW moments and steps: really compared


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("resume") / "uninterrupted"
    result = run(run_dir)
    assert result.returncode == 0, result.stderr[-3000:]
    return run_dir


def test_stopped_mid_epoch_and_resumed_is_bit_identical(reference: Path, tmp_path: Path) -> None:
    stopped = tmp_path / "stopped"
    # rank 1 raises the preemption flag at its 40th step; with the flag exchanged every step
    # (not about once a second) both ranks stop together at step 41
    result = run(stopped, NODERUN_DEBUG_PREEMPT_AT="1:40", NODERUN_PREEMPT_CHECK_SEC="0")
    assert result.returncode == EXIT_PREEMPTED, result.stderr[-3000:]
    assert "preempted by a signal to another rank" in result.stdout
    saved = checkpoint.latest(stopped / "checkpoints")
    assert saved is not None and saved.name == "epoch-0001-step-000014"  # 41 = 27 + 14
    record = json.loads((stopped / "run.json").read_text())
    assert record["status"] == "preempted" and record["exit_code"] == EXIT_PREEMPTED

    resumed = tmp_path / "resumed"
    result = run(resumed, "--resume", str(stopped))
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"resumed from {saved} (epoch 1 done, step 14 of the next" in result.stdout
    assert_identical(final_state(reference), final_state(resumed))
    # the metrics of the epochs it ran match too (train_loss includes the saved partial sums)
    reference_rows = (reference / "metrics.csv").read_text().splitlines()
    resumed_rows = (resumed / "metrics.csv").read_text().splitlines()
    assert resumed_rows[0] == reference_rows[0] and len(resumed_rows) == 3
    for ours, theirs in zip(resumed_rows[1:], reference_rows[2:], strict=True):
        assert ours.split(",")[:5] == theirs.split(",")[:5]


def rank_process(run_dir: Path, rank: int, timeout: float = 60) -> psutil.Process:
    """The worker process of ``rank`` in the run writing to ``run_dir``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for proc in psutil.process_iter(["cmdline"]):
            try:
                if SCRIPT not in (
                    proc.info["cmdline"] or []
                ) or "torch.distributed.run" in " ".join(proc.info["cmdline"]):
                    continue
                env = proc.environ()
            except psutil.Error:
                continue
            if RankContract.from_env(env).run_dir == str(run_dir) and env.get("RANK") == str(rank):
                return proc
        time.sleep(0.2)
    raise AssertionError(f"rank {rank} of {run_dir} never started")


def test_sigkill_during_checkpoint_write_leaves_previous_and_resume_uses_it(
    reference: Path, tmp_path: Path
) -> None:
    crashed = tmp_path / "crashed"
    proc = start_noderun(
        [*TWO_NODES, "--run-dir", str(crashed), SCRIPT, *SMALL],
        NODERUN_DEBUG_CHECKPOINT_PAUSE="epoch-0002:120",
        NODERUN_CHECKPOINT_MIN_SEC="0",  # every epoch's checkpoint is written: epoch 2's too
    )
    try:
        victim = rank_process(crashed, 0)
        writing = crashed / "checkpoints" / "epoch-0002"
        deadline = time.monotonic() + 120
        while not (writing / "state.pt").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert (writing / "state.pt").exists(), "epoch-0002 was never written"
        assert not checkpoint.is_complete(writing)
        os.kill(victim.pid, signal.SIGKILL)
        output, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 1, output[-3000:]
    assert "rank 0 (node 0, local rank 0) failed: killed by SIGKILL" in output
    assert checkpoint.latest(crashed / "checkpoints") == crashed / "checkpoints" / "epoch-0001"
    assert checkpoint.load(crashed / "checkpoints" / "epoch-0001")["model"]
    with pytest.raises(UsageError, match="epoch-0002 is incomplete"):
        checkpoint.load(writing)

    resumed = tmp_path / "resumed"
    result = run(resumed, "--resume", str(crashed))
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"resumed from {crashed / 'checkpoints' / 'epoch-0001'} (epoch 1 done" in result.stdout
    assert_identical(final_state(reference), final_state(resumed))


@pytest.fixture(scope="module")
def refused(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[subprocess.CompletedProcess[str], Path, Path]:
    """One run whose --resume names an incomplete checkpoint, under --max-restarts 3: the
    refusal (test_bad_resume_...) and the restart policy for bad input (test_bad_input_...)
    read it. A missing --resume path is refused the same way: tests/runtime/test_checkpoint.py."""
    root = tmp_path_factory.mktemp("refused")
    partial = root / "other" / "checkpoints" / "epoch-0004"
    partial.mkdir(parents=True)
    run_dir = root / "refused"
    argv = [*TWO_NODES, "--max-restarts", "3", "--run-dir", str(run_dir), SCRIPT, *SMALL,
            "--resume", str(partial)]  # fmt: skip
    return noderun(argv, timeout=240), run_dir, partial


def test_bad_resume_is_one_line_exit_2_and_writes_nothing(
    refused: tuple[subprocess.CompletedProcess[str], Path, Path],
) -> None:
    result, run_dir, partial = refused
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
    lines = [line for line in result.stdout.splitlines() if "UsageError" in line]
    assert len(lines) == 1, result.stdout  # printed once (rank 0), not once per rank
    assert f"checkpoint {partial} is incomplete" in lines[0]
    assert not (run_dir / "metrics.csv").exists() and not (run_dir / "checkpoints").exists()
    assert sorted(p.name for p in partial.iterdir()) == []


def test_max_restarts_restarts_the_gang_after_a_killed_rank_and_ends_identical(
    reference: Path, tmp_path: Path
) -> None:
    restarted = tmp_path / "restarted"
    argv = [*TWO_NODES, "--max-restarts", "2", "--run-dir", str(restarted), SCRIPT, *SMALL,
            "--resume", "auto"]  # fmt: skip
    proc = start_noderun(
        argv,
        NODERUN_DEBUG_CHECKPOINT_PAUSE="epoch-0002:4",  # both attempts pause there; one is hit
        NODERUN_CHECKPOINT_MIN_SEC="0",
        # rank 1 holds at epoch 3's 5th step (27 steps per epoch) until it is killed there: on a
        # loaded machine a kill sent "soon after epoch-0002 is written" landed after training ended
        NODERUN_DEBUG_WAIT_FOR_SIGNAL="1:59",
    )
    try:
        victim = rank_process(restarted, 1)
        writing = restarted / "checkpoints" / "epoch-0002"
        held = restarted / "logs" / "rank1.waiting-for-signal"
        assert wait_until(lambda: (writing / "state.pt").exists() and held.exists(), 120), (
            "epoch-0002 was never written or rank 1 never reached epoch 3"
        )
        os.kill(victim.pid, signal.SIGKILL)
        output, _ = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, output[-3000:]
    assert "restarting all ranks (restart 1 of 2)" in output
    # the survivor finishes committing epoch-0002 (its data was whole) while it winds down, or not:
    # either way the restart resumes from the newest *complete* checkpoint
    resumed = re.search(r"resumed from \S+/checkpoints/(epoch-000[12])", output)
    assert resumed, output[-3000:]
    assert checkpoint.is_complete(restarted / "checkpoints" / resumed.group(1))
    record = json.loads((restarted / "run.json").read_text())
    assert record["status"] == "completed" and record["restart_count"] == 1
    [first] = record["attempts"]
    assert first["status"] == "failed" and "SIGKILL" in first["failure"]["reason"]
    assert first["restart"] == "restarted the gang (restart 1 of 2)"
    assert_identical(final_state(reference), final_state(restarted))
    verified = cli(["verify", str(restarted)])  # both read every attempt
    assert "2 attempts: failed: rank 1: killed by SIGKILL" in verified.stdout, verified.stdout
    explained = cli(["explain", str(restarted)])
    assert "attempt 1: failed: rank 1: killed by SIGKILL; restarted the gang" in explained.stdout
    assert "attempt 2: completed" in explained.stdout


def test_bad_input_is_not_restarted(
    refused: tuple[subprocess.CompletedProcess[str], Path, Path],
) -> None:
    result, run_dir, _ = refused
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
    assert "restarting" not in result.stderr
    record = json.loads((run_dir / "run.json").read_text())
    assert "attempts" not in record and record["restart"].startswith("not restarted: bad input")
