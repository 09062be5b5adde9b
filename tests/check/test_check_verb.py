"""`noderun check` as a user runs it: exit codes, output lines, and noderun's own scripts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import ROOT, cli

FIXTURES = Path(__file__).parent / "fixtures"


def test_findings_exit_1_with_file_line_fix() -> None:
    path = FIXTURES / "seed002_wrong.sbatch"
    result = cli(["check", str(path)])
    assert result.returncode == 1, result.stderr
    assert result.stdout.startswith(f"{path}:13: ")
    assert "; fix: srun python" in result.stdout


def test_clean_script_exit_0_and_warnings_do_not_fail() -> None:
    result = cli(["check", str(FIXTURES / "seed002_fixed.sbatch")])
    assert result.returncode == 0
    assert "no launch mistakes found" in result.stdout
    warned = cli(["check", str(FIXTURES / "seed000_nvflare.slurm")])
    assert warned.returncode == 0
    assert ":8: warning: fixed port 29500" in warned.stdout


def test_json_output() -> None:
    path = str(FIXTURES / "seed003_wrong.slurm")
    result = cli(["check", "--json", path])
    assert result.returncode == 1
    found = json.loads(result.stdout)[path]
    assert {f["code"] for f in found} == {"global-rank-device", "fixed-port", "torchrun-once"}


@pytest.mark.parametrize("kind", ["missing", "directory", "binary"])
def test_unreadable_input_is_one_line_exit_2(tmp_path: Path, kind: str) -> None:
    target = tmp_path / "job.sbatch"
    if kind == "directory":
        target.mkdir()
    elif kind == "binary":
        target.write_bytes(b"\xff\xfe\x00#SBATCH")
    result = cli(["check", str(target)])
    assert result.returncode == 2
    assert result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1
    assert "hint:" in result.stderr


@pytest.mark.parametrize("mode", ["torchrun", "srun"])
def test_noderun_submit_scripts_pass_clean(tmp_path: Path, mode: str) -> None:
    dry = cli(
        [
            "submit",
            "--dry-run",
            "--mode",
            mode,
            "--nodes",
            "2",
            "--nproc-per-node",
            "2",
            "--run-dir",
            str(tmp_path / "run"),
            str(ROOT / "examples" / "ddp_classifier.py"),
        ]
    )
    assert dry.returncode == 0, dry.stderr
    script = dry.stdout.split("\n\n", 1)[0]
    (tmp_path / "job.sbatch").write_text(script + "\n")
    result = cli(["check", str(tmp_path / "job.sbatch")])
    assert result.returncode == 0, result.stdout
    assert "no launch mistakes found" in result.stdout
