"""The project owns what its tests need: no path outside the clone, its own Slurm lab, a torch
range with the pin in constraints.txt, and under CI a lab that is missing fails the suite."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.slurm import lab

OWN = ["Makefile", ".ci/run", "pyproject.toml", "constraints.txt"]


def _project_files() -> list[Path]:
    files = [ROOT / name for name in OWN]
    files += [
        p for p in (ROOT / "tests").rglob("*") if p.is_file() and "__pycache__" not in p.parts
    ]
    return files


def test_nothing_outside_the_clone_is_referenced() -> None:
    outside = "../" + "shared"  # spelled apart, so this file does not name it
    named = [str(p.relative_to(ROOT)) for p in _project_files() if outside in _text(p)]
    assert not named


def _text(path: Path) -> str:
    try:
        return path.read_text()
    except (UnicodeDecodeError, OSError):
        return ""


def test_make_lab_starts_the_projects_own_lab() -> None:
    shown = subprocess.run(
        ["make", "--no-print-directory", "-n", "lab"], cwd=ROOT, capture_output=True, text=True
    )
    assert shown.stdout.splitlines() == ["tests/slurm/lab/up.sh -n 3 -a"]
    for script in ("up.sh", "down.sh"):
        path = ROOT / "tests" / "slurm" / "lab" / script
        assert path.stat().st_mode & 0o111, f"{script} is not executable"
        assert subprocess.run(["bash", "-n", str(path)]).returncode == 0


def test_torch_is_a_range_and_the_pin_is_a_constraint() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    torch = [d for d in project["dependencies"] if d.startswith("torch")]
    assert torch == ["torch>=2.13,<3"]
    assert "version" in project["dynamic"] and "version" not in project
    assert "torch==2.13.0" in (ROOT / "constraints.txt").read_text().splitlines()
    makefile = (ROOT / "Makefile").read_text()
    assert "PIP := $(BIN)/pip install -q -c constraints.txt" in makefile
    installs = [line.strip() for line in makefile.splitlines() if "-e '.[" in line]
    own = [line for line in installs if "MATRIX_VENV" not in line]  # the matrix: another torch
    assert own and all(line.startswith("$(PIP) ") for line in own), own
    assert (ROOT / "LICENSE").read_text().lstrip().startswith("Apache License")
    assert (ROOT / "src" / "noderun" / "py.typed").is_file()


def test_a_missing_lab_skips_here_and_fails_under_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lab, "lab_missing", lambda: "no sinfo here")
    monkeypatch.setenv("CI", "false")
    with pytest.raises(pytest.skip.Exception):
        lab.require_lab()
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI=true and no sinfo here"):
        lab.require_lab()


def test_under_ci_a_skipped_lab_test_is_a_failure(tmp_path: Path) -> None:
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    slurm: x\n    ssh: x\n")
    (tmp_path / "test_probe.py").write_text(
        "import pytest\n"
        "@pytest.mark.slurm\n"
        "def test_lab():\n    pytest.skip('no lab')\n"
        "def test_plain():\n    pytest.skip('not a lab test')\n"
    )

    def run(ci: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "tests.conftest", "-p", "no:cacheprovider",
             "-c", str(tmp_path / "pytest.ini"), str(tmp_path / "test_probe.py")],
            cwd=ROOT, capture_output=True, text=True, env={"CI": ci, "PATH": "/usr/bin:/bin"},
        )  # fmt: skip
        return done.stdout.strip().splitlines()[-1]

    assert "2 skipped" in run("false")
    under_ci = run("true")
    assert "1 failed" in under_ci and "1 skipped" in under_ci, under_ci
