"""`noderun verify` of scripts that do not import noderun: a plain torch DDP script and a
Lightning script, launched by `noderun run` here and `noderun submit` on the Slurm lab."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from noderun import cli
from tests.conftest import ROOT, noderun
from tests.slurm.lab import require_lab

pytestmark = pytest.mark.slow

SCENARIOS = ROOT / "tests" / "explain" / "scenarios"
PLAIN = str(SCENARIOS / "plain_ddp.py")
LIGHTNING = str(SCENARIOS / "lightning_fit.py")


def _plain_args(run_dir: Path) -> list[str]:
    return [PLAIN, "--out", str(run_dir), "--exit-hard"]


def _lightning_args(run_dir: Path) -> list[str]:
    return [LIGHTNING, "--nodes", "2", "--devices", "2", "--out", str(run_dir)]


def verify(run_dir: Path, *extra: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict]:
    code = cli.main(["verify", str(run_dir), "--json", *extra])
    return code, json.loads(capsys.readouterr().out)


def checks(report: dict) -> dict[str, dict]:
    return {c["check"]: c for c in report["checks"]}


@pytest.fixture(scope="module")
def local_runs(plain_run: Path, lightning_run: tuple[Path, str]) -> dict[str, Path]:
    """The plain script: tests/conftest.py's plain_run (_plain_args on 2 x 1 ranks; its report
    holds no rank count, its world-size check is a SKIP; shared with test_summary). Lightning:
    tests/conftest.py's lightning_run, docs/lightning.md's run of examples/lightning_classifier.py
    (no noderun import either) on 2 x 2 ranks for 4 epochs (shared with its example's test):
    its report names the 4 processes. The lab test runs both scenario scripts at 2 x 2."""
    return {"plain": plain_run, "lightning": lightning_run[0]}


def assert_plain_report(report: dict) -> None:
    found = checks(report)
    assert report["healthy"] is True, report["checks"]
    for name in ("runtime-json", "ddp-init", "world-size", "backend", "metrics"):
        assert found[name]["status"] == "SKIP", found[name]
        assert found[name]["detail"]  # says why
    assert "noderun.init()" in found["runtime-json"]["detail"]
    assert found["run-status"]["status"] == "PASS"
    assert found["checkpoint"]["status"] == "PASS"
    assert "checkpoints/model.pt loads" in found["checkpoint"]["detail"]
    assert found["rank-logs"]["status"] == "PASS"


def assert_lightning_report(report: dict, nodes: int, epochs: int) -> None:
    found = checks(report)
    assert report["healthy"] is True, report["checks"]
    assert found["runtime-json"]["status"] == "SKIP"
    assert "All distributed processes registered. Starting with 4" in found["ddp-init"]["detail"]
    assert found["world-size"]["status"] == "PASS"
    assert found["backend"]["detail"].startswith("gloo")
    assert found["metrics"]["status"] == "PASS" and "CSVLogger" in found["metrics"]["detail"]
    assert found["epochs"]["detail"].startswith(f"{epochs} epochs")
    assert found["losses"]["status"] == "PASS"
    assert ".ckpt loads" in found["checkpoint"]["detail"]
    assert report["facts"]["epochs_completed"] == epochs and report["facts"]["nodes"] == nodes


def test_plain_torch_script_is_healthy_with_skips(local_runs, capsys):
    code, report = verify(local_runs["plain"], capsys=capsys)
    assert code == 0
    assert_plain_report(report)


def test_require_turns_missing_evidence_into_failures(local_runs, capsys):
    code, report = verify(local_runs["plain"], "--require", "metrics,checkpoint", capsys=capsys)
    assert code == 1
    found = checks(report)
    assert (
        found["metrics"]["status"] == "FAIL" and "--require metrics" in found["metrics"]["detail"]
    )
    assert found["checkpoint"]["status"] == "PASS"  # it exists: required and present
    (local_runs["plain"] / "checkpoints" / "model.pt").rename(local_runs["plain"] / "gone")
    try:
        code, report = verify(local_runs["plain"], capsys=capsys)
        assert code == 0 and checks(report)["checkpoint"]["status"] == "SKIP"
        code, report = verify(local_runs["plain"], "--require", "checkpoint", capsys=capsys)
        assert code == 1 and checks(report)["checkpoint"]["status"] == "FAIL"
    finally:
        (local_runs["plain"] / "gone").rename(local_runs["plain"] / "checkpoints" / "model.pt")


def test_an_unknown_required_check_is_a_usage_error(local_runs, capsys):
    assert cli.main(["verify", str(local_runs["plain"]), "--require", "metrics,nosuch"]) == 2
    assert "unknown check nosuch" in capsys.readouterr().err


def test_lightning_script_is_judged_from_its_own_lines_and_files(local_runs, capsys):
    code, report = verify(local_runs["lightning"], capsys=capsys)
    assert code == 0
    assert_lightning_report(report, nodes=2, epochs=4)  # the page's --epochs 4


def test_lightning_world_size_other_than_asked_fails(local_runs, capsys):
    code, report = verify(local_runs["lightning"], "--world-size", "8", capsys=capsys)
    assert code == 1
    assert "4 processes registered" in checks(report)["world-size"]["detail"]


@pytest.mark.slurm
@pytest.mark.parametrize(("name", "mode"), [("plain", "torchrun"), ("lightning", "srun")])
def test_on_the_lab(name: str, mode: str, tmp_path: Path, capsys) -> None:
    require_lab()
    run_dir = tmp_path / name
    args = _plain_args(run_dir) if name == "plain" else _lightning_args(run_dir)
    done = noderun(
        ["submit", "--nodes", "2", "--nproc-per-node", "2", "--mode", mode,
         "--run-dir", str(run_dir), "--wait", *args],
        timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    code, report = verify(run_dir, capsys=capsys)
    assert code == 0, report["checks"]
    assert checks(report)["job-state"]["status"] == "PASS"
    if name == "plain":
        assert_plain_report(report)
    else:
        assert_lightning_report(report, nodes=2, epochs=2)  # lightning_fit.py's 2 epochs
