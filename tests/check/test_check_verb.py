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
    found = json.loads(result.stdout)["files"][path]
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


@pytest.mark.parametrize(
    ("text", "language"),
    [
        ("#!/usr/bin/env python3\nimport submitit\nex = submitit.AutoExecutor('x')\n", "python"),
        ("#!/bin/csh\n#SBATCH --ntasks-per-node=4\nsetenv X 1\npython train.py\n", "csh"),
    ],
)
def test_not_bash_is_one_line_and_no_findings(tmp_path: Path, text: str, language: str) -> None:
    script = tmp_path / "job.sh"
    script.write_text(text)
    result = cli(["check", str(script)])
    assert result.returncode == 0, result.stdout
    assert result.stdout.splitlines() == [
        f"{script}: not a bash batch script ({language}); noderun check reads bash scripts "
        "only, nothing checked"
    ]


def test_file_checks_use_the_submit_dir(tmp_path: Path) -> None:
    script = tmp_path / "job.sbatch"
    script.write_text(
        "#!/bin/bash\n#SBATCH --nodes=2\n#SBATCH --output=logs/%j.out\nmkdir -p logs\n"
        "srun python train.py\n"
    )
    elsewhere = tmp_path / "submit"
    elsewhere.mkdir()
    result = cli(["check", str(script)], cwd=elsewhere)
    assert result.returncode == 1
    assert f"{script}:3: #SBATCH --output folder logs/ does not exist" in result.stdout
    assert f"{script}:5: train.py does not exist" in result.stdout
    (elsewhere / "logs").mkdir()
    (tmp_path / "train.py").write_text("")  # beside the script counts too
    clean = cli(["check", "--submit-dir", str(elsewhere), str(script)])
    assert clean.returncode == 0, clean.stdout
    assert clean.stdout == f"{script}: no launch mistakes found\n"
    skipped = cli(["check", "--no-file-checks", str(tmp_path / "job.sbatch")], cwd=ROOT)
    assert skipped.returncode == 0, skipped.stdout


def test_bad_submit_dir_and_huge_file(tmp_path: Path) -> None:
    script = tmp_path / "job.sbatch"
    script.write_text("#!/bin/bash\nsrun python t.py\n")
    result = cli(["check", "--submit-dir", str(tmp_path / "nope"), str(script)])
    assert result.returncode == 2 and result.stdout == ""
    assert "is not a directory" in result.stderr
    huge = tmp_path / "huge.sbatch"
    with huge.open("wb") as handle:
        handle.truncate(5 * 1024 * 1024)
    result = cli(["check", str(huge)])
    assert result.returncode == 2 and result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1 and "not a batch script" in result.stderr


def test_other_encoding_and_empty(tmp_path: Path) -> None:
    latin = tmp_path / "latin1.sbatch"
    latin.write_bytes(
        "#!/bin/bash\n# entraînement\n#SBATCH -N 2\ntorchrun t.py\n".encode("latin-1")
    )
    result = cli(["check", "--no-file-checks", str(latin)])
    assert result.returncode == 1 and ":4: `torchrun t.py` runs once" in result.stdout
    empty = tmp_path / "empty.sbatch"
    empty.write_text("")
    result = cli(["check", str(empty)])
    assert result.returncode == 0 and result.stdout == f"{empty}: empty, nothing to check\n"
