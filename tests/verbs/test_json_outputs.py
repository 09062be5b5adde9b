"""Every verb's --json: one JSON object on stdout with a "schema" version; run, submit, scale
and sweep print theirs at the end, with every other line (the ranks' too) on stderr."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from noderun import cli
from noderun.cli_output import JSON_SCHEMA
from tests.conftest import ROOT, SCRIPTS, noderun

PLAIN = str(SCRIPTS / "plain_torch.py")
SBATCH = ROOT / "tests" / "check" / "fixtures" / "seed003_wrong.slurm"


def _one_object(out: str) -> dict[str, Any]:
    """stdout holds exactly one JSON object, with the schema version."""
    data = json.loads(out)  # fails on any other line
    assert isinstance(data, dict) and data["schema"] == JSON_SCHEMA, out
    assert next(iter(data)) == "schema"
    return data


def _json_of(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    code = cli.main(argv)
    return code, _one_object(capsys.readouterr().out)


def test_verify(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "run.json").write_text(json.dumps({"status": "completed", "exit_code": 0}))
    code, data = _json_of(["verify", "--json", str(tmp_path)], capsys)
    assert code in (0, 1) and "healthy" in data and "checks" in data


def test_explain(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "rank0.log"
    log.write_text("RuntimeError: CUDA error: invalid device ordinal\n")
    code, data = _json_of(["explain", "--json", str(log)], capsys)
    assert code == 1 and data["findings"]  # explain exits 1 when it found a failure


def test_check(capsys: pytest.CaptureFixture[str]) -> None:
    code, data = _json_of(["check", "--json", str(SBATCH)], capsys)
    assert code == 1 and data["files"][str(SBATCH)]


def test_doctor(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    from noderun.doctor import runner

    class Result:
        healthy = True
        duration_sec = 0.0

        def to_dict(self) -> dict[str, object]:
            return {"healthy": True, "checks": []}

    monkeypatch.setattr(runner, "run_local", lambda *args: Result())
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.chdir(tmp_path)
    code, data = _json_of(["doctor", "--json"], capsys)
    assert code == 0 and data["healthy"] is True


def test_stacks(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from noderun.stacks import Snapshot
    from noderun.stacks.model import Frame, RankStack
    from noderun.verbs import stacks

    frames = (Frame("main", "train.py", 3),)
    snapshot = Snapshot((RankStack(0, "h", 1, frames), RankStack(1, "h", 2, frames)), 2)
    monkeypatch.setattr(stacks, "take", lambda target: (snapshot, f"run {target}"))
    code, data = _json_of(["stacks", "--json", "somewhere"], capsys)
    assert code == 0 and data["world_size"] == 2 and data["groups"]


def test_scale(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    from noderun.scale.analysis import PointResult
    from noderun.verbs import scale

    def run_jobs(jobs: Any, parallel: int, timeout: Any, on_start: Any, on_done: Any) -> Any:
        for job in jobs:  # the sweep runner: what a point prints must not reach stdout
            on_start(job)
            print(f"rank lines of {job.name}")
            on_done(job, 0)
        return {job.name: 0 for job in jobs}

    def result(point: Any, job: Any, code: int) -> PointResult:
        return PointResult(point=point, ok=True, run_dir=str(job.run_dir), wall_sec=2.0)

    monkeypatch.setattr(scale, "run_jobs", run_jobs)
    monkeypatch.setattr(scale, "_result", result)
    out = tmp_path / "sweep"
    argv = ["scale", "--json", "--nodes", "1,2", "--out", str(out), PLAIN]
    code, data = _json_of(argv, capsys)
    assert code == 0 and data["verb"] == "scale" and data["out"] == str(out)
    assert [p["name"] for p in data["points"]] == ["1x1", "2x1"]
    assert "scaling.csv" in data["files"]


def test_sweep(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    from noderun.sweep.runner import Judgement
    from noderun.verbs import sweep

    def run_jobs(jobs: Any, parallel: int, timeout: Any, on_start: Any, on_done: Any) -> Any:
        codes = {job.name: 0 if job.name == "lr=1" else 1 for job in jobs}
        for job in jobs:  # what a point prints must not reach stdout
            on_start(job)
            print(f"rank lines of {job.name}")
            job.run_dir.mkdir(parents=True)
            (job.run_dir / "metrics.csv").write_text(f"epoch,train_loss\n1,0.{len(job.name)}\n")
            on_done(job, codes[job.name])
        return codes

    def judge(run_dir: Path, log: Path, code: int | None) -> Judgement:
        ok = code == 0
        return Judgement("completed" if ok else "failed", ok, "healthy" if ok else "unhealthy",
                         "" if ok else "rank-crashed: rank 1", 2.0)  # fmt: skip

    monkeypatch.setattr(sweep, "run_jobs", run_jobs)
    monkeypatch.setattr(sweep, "judge", judge)
    out = tmp_path / "sweep"
    code, data = _json_of(["sweep", "--json", "--param", "lr=1,2", "--out", str(out), PLAIN],
                          capsys)  # fmt: skip
    assert code == 1 and data["verb"] == "sweep" and data["out"] == str(out)
    assert data["files"] == ["sweep.csv"] and data["failed"] == ["lr=2"]
    first, second = data["points"]
    assert (first["point"], first["params"], first["status"], first["verify"]) == (
        "lr=1", {"lr": "1"}, "completed", "healthy")  # fmt: skip
    assert first["metrics"] == {"epoch": "1", "train_loss": "0.4"}
    assert (second["status"], second["cause"]) == ("failed", "rank-crashed: rank 1")
    assert second["run_dir"] == str(out / "lr=2") and second["job_id"] is None


def test_run_dry_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    code = cli.main(["run", "--json", "--dry-run", "--run-dir", "r", PLAIN])
    captured = capsys.readouterr()
    data = _one_object(captured.out)
    assert code == 0 and data["status"] == "dry-run" and data["run_dir"] == str(tmp_path / "r")
    assert "torch.distributed.run" in captured.err  # the plan: on stderr


def test_run_error_is_still_one_object(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    code = cli.main(["run", "--json", "missing.py"])
    captured = capsys.readouterr()
    data = _one_object(captured.out)
    assert code == 2 and data["status"] == "error" and data["exit_code"] == 2
    assert "script 'missing.py' not found" in data["error"]
    assert "noderun: error: script 'missing.py' not found" in captured.err


def test_submit_dry_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", "/nonexistent")  # no sbatch: the dry run asks no cluster
    code = cli.main(["submit", "--json", "--dry-run", "--run-dir", "r", PLAIN])
    captured = capsys.readouterr()
    data = _one_object(captured.out)
    assert code == 0 and data["status"] == "dry-run" and data["job_id"] is None
    assert data["run_dir"] == str(tmp_path / "r") and "#SBATCH" in captured.err


@pytest.mark.slow
def test_a_real_run_prints_one_object_after_its_ranks(tmp_path: Path) -> None:
    result = noderun(["run", "--json", "--nproc-per-node", "2", PLAIN], cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    data = _one_object(result.stdout)
    assert data["status"] == "completed" and data["exit_code"] == 0 and data["job_id"] is None
    assert Path(data["run_dir"], "run.json").is_file()
    assert "run dir" in result.stderr  # noderun's own lines, and the ranks', on stderr


@pytest.mark.slow
@pytest.mark.slurm
def test_submit_on_the_lab_reports_the_job(tmp_path: Path) -> None:
    from tests.slurm.lab import require_lab

    require_lab()
    run_dir = tmp_path / "run"
    argv = ["submit", "--json", "--wait", "--nodes", "2", "--run-dir", str(run_dir), PLAIN]
    result = noderun(argv, cwd=tmp_path, timeout=240)
    assert result.returncode == 0, result.stderr[-2000:]
    data = _one_object(result.stdout)
    assert data["job_id"] and data["job_id"].isdigit()
    assert data["status"] == "completed" and data["run_dir"] == str(run_dir)
    assert f"submitted job {data['job_id']}" in result.stderr
