"""Helpers for the stall and stacks tests: the stuck-rank script, PATH with and without py-spy."""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import SCRIPTS

STUCK = SCRIPTS / "stuck_rank.py"
VENV_BIN = str(Path(sys.executable).parent)


def path_with_py_spy() -> str:
    return VENV_BIN + os.pathsep + os.environ.get("PATH", "")


def path_without_py_spy() -> str:
    """PATH minus every directory holding a py-spy (python itself is run by absolute path)."""
    dirs = os.environ.get("PATH", "").split(os.pathsep)
    return os.pathsep.join(d for d in dirs if d and not (Path(d) / "py-spy").exists())


def line_of(text: str, script: Path = STUCK) -> int:
    """The 1-based line of ``script`` holding ``text`` (so tests never hard-code numbers)."""
    lines = script.read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if text in line)


def wait_for_file(path: Path, proc_alive: object = None, timeout: float = 180) -> None:
    """Wait for the event (a file appearing); fail if the job ended first."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        poll = getattr(proc_alive, "poll", None)
        if poll is not None and poll() is not None:
            pytest.fail(f"the job ended before {path.name} appeared: {proc_alive.stdout.read()}")  # type: ignore[attr-defined]
        if time.monotonic() > deadline:
            pytest.fail(f"{path} never appeared")
        time.sleep(0.1)


@pytest.fixture
def stuck_script(tmp_path: Path) -> Path:
    """A private copy, so leftover processes can be found by its path."""
    target = tmp_path / f"stuck_{tmp_path.name}.py"
    shutil.copy(STUCK, target)
    return target
