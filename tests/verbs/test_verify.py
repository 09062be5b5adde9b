"""`noderun verify` on real run directories made by `noderun run`, and on broken copies of them."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from noderun import cli
from tests.conftest import SCRIPTS, noderun
from tests.conftest import cli as in_process

pytestmark = pytest.mark.slow

TRAINER = str(SCRIPTS / "tiny_trainer.py")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One healthy 2-node run and one whose rank 1 crashes in epoch 2 (real launches)."""
    root = tmp_path_factory.mktemp("verify-runs")
    healthy, crashed = root / "healthy", root / "crashed"
    ok = noderun(["run", "--nnodes", "2", "--run-dir", str(healthy), TRAINER, "--epochs", "3"])
    assert ok.returncode == 0, ok.stderr
    bad = noderun(
        [
            "run",
            "--nnodes",
            "2",
            "--run-dir",
            str(crashed),
            TRAINER,
            "--crash-rank",
            "1",
            "--crash-epoch",
            "2",
        ]
    )
    assert bad.returncode != 0
    return {"healthy": healthy, "crashed": crashed}


def verify_json(run_dir: Path, *extra: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict]:
    code = cli.main(["verify", str(run_dir), "--json", *extra])
    report = json.loads(capsys.readouterr().out)
    return code, report


def statuses(report: dict) -> dict[str, str]:
    return {c["check"]: c["status"] for c in report["checks"]}


def broken_copy(runs: dict[str, Path], tmp_path: Path, damage: Callable[[Path], None]) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(runs["healthy"], copy)
    damage(copy)
    return copy


def test_healthy_run_passes_every_check(runs, capsys):
    code, report = verify_json(runs["healthy"], capsys=capsys)
    assert code == 0
    assert report["healthy"] is True
    assert set(statuses(report).values()) == {"PASS"}, report["checks"]
    facts = report["facts"]
    assert facts["world_size"] == 2 and facts["nodes"] == 2 and facts["backend"] == "gloo"
    assert facts["epochs_completed"] == 3
    assert facts["final_train_loss"] > 0 and "final_val_rmse" in facts
    checkpoint = next(c for c in report["checks"] if c["check"] == "checkpoint")
    assert "epoch-0003" in checkpoint["detail"]


def test_plain_report_when_piped(runs):
    done = noderun(["verify", str(runs["healthy"])])
    assert done.returncode == 0
    lines = done.stdout.splitlines()
    assert lines[1].split() == ["check", "status", "detail"]
    assert any(line.split()[:2] == ["checkpoint", "PASS"] for line in lines)
    assert "\x1b[" not in done.stdout  # no colour codes in a pipe
    assert lines[-1] == "verdict: HEALTHY"


def test_failed_run_names_the_rank_and_points_to_explain(runs, capsys):
    code, report = verify_json(runs["crashed"], capsys=capsys)
    assert code == 1
    checks = {c["check"]: c for c in report["checks"]}
    assert checks["run-status"]["status"] == "FAIL"
    assert "rank 1" in checks["run-status"]["detail"]
    assert "noderun explain" in checks["run-status"]["fix"]
    assert checks["rank-logs"]["status"] == "FAIL"
    assert checks["rank-logs"]["detail"].startswith("rank 1 failed first")
    assert report["facts"]["epochs_completed"] == 1
    assert cli.main(["verify", str(runs["crashed"])]) == 1
    assert f"noderun explain {runs['crashed']}" in capsys.readouterr().out


def _nan_loss(run: Path) -> None:
    lines = (run / "metrics.csv").read_text().splitlines()
    header = lines[0].split(",")
    cells = lines[2].split(",")
    cells[header.index("val_loss")] = "nan"
    lines[2] = ",".join(cells)
    (run / "metrics.csv").write_text("\n".join(lines) + "\n")


def _repeated_epoch(run: Path) -> None:
    lines = (run / "metrics.csv").read_text().splitlines()
    (run / "metrics.csv").write_text("\n".join([*lines, lines[-1]]) + "\n")


def _runtime_world(run: Path) -> None:
    record = json.loads((run / "runtime.json").read_text())
    record["world_size"] = 1
    (run / "runtime.json").write_text(json.dumps(record))


def _one_rank_missing_from_group(run: Path) -> None:
    record = json.loads((run / "runtime.json").read_text())
    record["rank_hosts"] = record["rank_hosts"][:1]
    (run / "runtime.json").write_text(json.dumps(record))


def _incomplete_checkpoints(run: Path) -> None:
    for marker in (run / "checkpoints").glob("*/.complete"):
        marker.unlink()


def _corrupt_checkpoint(run: Path) -> None:
    final = sorted((run / "checkpoints").iterdir())[-1]
    (final / "state.pt").write_bytes(b"not a checkpoint")


def _nan_weights(run: Path) -> None:
    import torch

    final = sorted((run / "checkpoints").iterdir())[-1]
    state = torch.load(final / "state.pt", weights_only=True)
    state["model"]["weight"].fill_(float("nan"))
    torch.save(state, final / "state.pt")


def _no_model(run: Path) -> None:
    import torch

    final = sorted((run / "checkpoints").iterdir())[-1]
    torch.save({"optimizer": {}}, final / "state.pt")


def _still_running(run: Path) -> None:
    record = json.loads((run / "run.json").read_text())
    record["status"] = "running"
    del record["end_time"]
    (run / "run.json").write_text(json.dumps(record))


def _traceback_in_log(run: Path) -> None:
    with open(run / "logs" / "rank0.log", "a") as handle:
        handle.write("Traceback (most recent call last):\n  File 'x.py'\nValueError: boom\n")


@pytest.mark.parametrize(
    ("damage", "check", "words"),
    [
        (lambda r: (r / "run.json").unlink(), "run-json", "run.json is missing"),
        (lambda r: (r / "run.json").write_text("{half"), "run-json", "unreadable"),
        (_still_running, "run-status", "no end time"),
        (lambda r: (r / "runtime.json").unlink(), "runtime-json", "noderun.init()"),
        (_runtime_world, "world-size", "world size 1, 2 was asked"),
        (_one_rank_missing_from_group, "ddp-init", "1 of 2 ranks reported in"),
        (lambda r: (r / "metrics.csv").unlink(), "metrics", "metrics.csv is missing"),
        (lambda r: (r / "metrics.csv").write_text("epoch,train_loss\n"), "metrics", "no epoch"),
        (_nan_loss, "losses", "val_loss = nan"),
        (_repeated_epoch, "epochs", "epoch 3 after 3"),
        (lambda r: shutil.rmtree(r / "checkpoints"), "checkpoint", "none written"),
        (_incomplete_checkpoints, "checkpoint", "only incomplete"),
        (_corrupt_checkpoint, "checkpoint", "does not load"),
        (_nan_weights, "checkpoint", "NaN"),
        (_no_model, "checkpoint", "no model state"),
        (_traceback_in_log, "rank-logs", "rank-crashed: ValueError: boom"),
    ],
    ids=[
        "no-run-json",
        "bad-run-json",
        "still-running",
        "no-runtime-json",
        "wrong-world",
        "rank-not-in-group",
        "no-metrics",
        "empty-metrics",
        "nan-loss",
        "repeated-epoch",
        "no-checkpoint",
        "incomplete-checkpoint",
        "corrupt-checkpoint",
        "nan-weights",
        "no-model",
        "traceback",
    ],
)
def test_damaged_run_fails_the_right_check(runs, tmp_path, capsys, damage, check, words):
    run = broken_copy(runs, tmp_path, damage)
    code, report = verify_json(run, capsys=capsys)
    assert code == 1
    failed = {c["check"]: c["detail"] for c in report["checks"] if c["status"] == "FAIL"}
    assert check in failed, report["checks"]
    assert words in failed[check]


def test_expectations_from_the_command_line(runs, capsys):
    code, report = verify_json(runs["healthy"], "--world-size", "4", "--epochs", "5", capsys=capsys)
    assert code == 1
    assert statuses(report)["world-size"] == "FAIL" and statuses(report)["epochs"] == "FAIL"
    code, report = verify_json(runs["healthy"], "--backend", "nccl", capsys=capsys)
    assert code == 1 and statuses(report)["backend"] == "FAIL"
    code, report = verify_json(
        runs["healthy"], "--world-size", "2", "--nnodes", "2", "--epochs", "3", capsys=capsys
    )
    assert code == 0


def test_skip_a_check(runs, tmp_path, capsys):
    run = broken_copy(runs, tmp_path, lambda r: shutil.rmtree(r / "checkpoints"))
    code, report = verify_json(run, "--skip", "checkpoint", capsys=capsys)
    assert code == 0 and statuses(report)["checkpoint"] == "SKIP"


def _a_file(root: Path) -> Path:
    (root / "file.txt").write_text("x")
    return root / "file.txt"


def _an_empty_dir(root: Path) -> Path:
    (root / "empty").mkdir()
    return root / "empty"


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (lambda p: p / "missing", "does not exist"),
        (_a_file, "not a directory"),
        (_an_empty_dir, "not a run directory"),
    ],
    ids=["missing", "file", "empty-dir"],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, make, words):
    target = make(tmp_path)
    done = in_process(["verify", str(target)])
    assert done.returncode == 2
    assert done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1 and words in done.stderr
    assert "hint:" in done.stderr


def test_unknown_skip_is_a_usage_error(runs, capsys):
    assert cli.main(["verify", str(runs["healthy"]), "--skip", "nope"]) == 2
    assert "--skip takes" in capsys.readouterr().err


REQUEUED = "slurmstepd-node1: error: *** STEP 697.0 ON node1 CANCELLED AT 2026-11-25T15:15:21"


@pytest.mark.parametrize(
    ("line", "status"),
    [(f"{REQUEUED} DUE TO JOB REQUEUE ***", "PASS"), (f"{REQUEUED} ***", "FAIL")],
    ids=["requeued", "cancelled"],
)
def test_a_requeue_in_a_rank_log_is_no_crash(runs, tmp_path, capsys, line, status):
    """A preempted job's rank log keeps slurmstepd's requeue line across the restart."""

    def requeued(run: Path) -> None:
        with open(run / "logs" / "rank0.log", "a") as log:
            log.write(line + "\n")

    _, report = verify_json(broken_copy(runs, tmp_path, requeued), capsys=capsys)
    assert statuses(report)["rank-logs"] == status, report["checks"]
