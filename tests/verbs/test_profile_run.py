"""``noderun run --profile``: traces and the step table for the examples, and plain scripts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import ROOT, SCRIPTS, cli, noderun
from tests.docs.test_snippets import run_snippet_of

CLASSIFIER = str(ROOT / "examples" / "ddp_classifier.py")
TRAFFIC = str(ROOT / "examples" / "traffic_regression.py")


def rank_record(run_dir: Path, rank: int) -> dict:
    return json.loads((run_dir / "profile" / f"rank{rank}.json").read_text())


def assert_steps_add_up(record: dict, steps: list[int]) -> None:
    assert [s["step"] for s in record["steps"]] == steps
    for step in record["steps"]:
        assert sum(step["phases"].values()) == pytest.approx(step["seconds"], rel=0.01)
        assert step["phases"]["forward"] > 0 and step["phases"]["backward"] > 0
        assert step["phases"]["optimizer"] > 0 and step["phases"]["data"] > 0


@pytest.mark.slow
def test_classifier_profiles_the_chosen_rank_and_window(tmp_path: Path) -> None:
    """docs/scaling.md's profiling commands as written (one run for the page and this test):
    ``noderun run --nnodes 2 --nproc-per-node 2 --run-dir runs/profiled --profile
    steps=5:10,ranks=0,1 examples/ddp_classifier.py --epochs 1``, then ``noderun verify``."""
    result = run_snippet_of(  # exit 0 of both asserted
        "docs/scaling.md",
        "tests/verbs/test_profile_run.py::test_classifier_profiles_the_chosen_rank_and_window",
        tmp_path,
    )
    run_dir = tmp_path / "runs" / "profiled"
    profile = run_dir / "profile"
    for rank in (2, 3):  # ranks 2 and 3 were not asked for
        assert not (profile / f"rank{rank}.json").exists()
    for rank in (0, 1):
        record = rank_record(run_dir, rank)
        assert_steps_add_up(record, [5, 6, 7, 8, 9, 10])
        assert all(s["phases"]["comm"] > 0 for s in record["steps"])  # DDP's all_reduce wait
        assert (profile / record["trace"]).stat().st_size > 1000
        assert (profile / f"rank{rank}.ops.txt").read_text().strip()
    table = (profile / "breakdown.md").read_text()
    rows = [line for line in table.splitlines() if line[:3] in ("| 0", "| 1", "| 2", "| 3")]
    assert [row[:6] for row in rows] == ["| 0 | ", "| 1 | "], table
    assert "Where the step time goes" in result.stdout and "| 1 | " in result.stdout
    verify = cli(["verify", str(run_dir)])
    assert verify.returncode == 0, verify.stdout
    assert "Where the step time goes" in verify.stdout and "| 1 | " in verify.stdout


@pytest.mark.slow
def test_regression_profiled_through_the_variable_charges_its_checkpoints(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    result = noderun(
        ["run", "--run-dir", str(run_dir), TRAFFIC, "--epochs", "1", "--days", "7",
         "--sensors", "2", "--checkpoint-every", "2"],
        NODERUN_PROFILE="steps=1:4,trace=0",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    record = rank_record(run_dir, 0)
    assert_steps_add_up(record, [1, 2, 3, 4])
    assert record["trace"] is None
    checkpoints = [s["phases"]["checkpoint"] for s in record["steps"]]
    assert checkpoints[1] > 0 and checkpoints[3] > 0  # steps 2 and 4 saved one
    assert checkpoints[0] == 0 and checkpoints[2] == 0


@pytest.mark.slow
def test_a_plain_script_is_told_why_there_is_no_profile(tmp_path: Path) -> None:
    """plain_torch.py: no noderun import, one all_reduce (no DDP: its ranks would import
    torch._dynamo, ~1.2 CPU-s each, for nothing this test reads)."""
    run_dir = tmp_path / "run"
    result = noderun(
        ["run", "--nnodes", "2", "--run-dir", str(run_dir), "--profile", "on",
         str(SCRIPTS / "plain_torch.py")]
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "profile: no rank wrote one" in result.stdout
    assert "noderun.init()" in result.stdout
    assert not (run_dir / "profile").exists()


def test_a_bad_spec_is_one_line_and_starts_nothing(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    result = noderun(["run", "--run-dir", str(run_dir), "--profile", "steps=9:2", CLASSIFIER])
    assert result.returncode == 2
    assert "the last step comes before the first" in result.stderr
    assert not run_dir.exists()
    bad_env = noderun(["run", "--run-dir", str(run_dir), CLASSIFIER], NODERUN_PROFILE="x")
    assert bad_env.returncode == 2 and "NODERUN_PROFILE" in bad_env.stderr
    assert not run_dir.exists()
