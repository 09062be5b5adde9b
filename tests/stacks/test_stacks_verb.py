"""``noderun stacks`` and the stall options: bad input is one line, nothing started."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import noderun
from tests.slurm.lab import require_lab
from tests.stacks.conftest import STUCK


def test_stacks_of_nothing_is_one_line(tmp_path: Path) -> None:
    missing = noderun(["stacks", str(tmp_path / "nope")])
    assert missing.returncode == 2
    assert missing.stderr.strip().count("\n") == 0 and "neither a run directory" in missing.stderr
    idle = noderun(["stacks", str(tmp_path)])
    assert idle.returncode == 1 and idle.stderr.strip().count("\n") == 0
    assert f"no live rank of run {tmp_path} found on this machine" in idle.stderr


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--on-stall", "maybe", "'maybe' is not one of report, kill"),
        ("--stall-timeout", "-3", "-3 must be 0 (off) or more seconds"),
        ("--stall-timeout", "soon", "'soon' is not a number of seconds"),
    ],
)
def test_bad_stall_options_are_one_line(
    tmp_path: Path, option: str, value: str, message: str
) -> None:
    result = noderun(["run", "--run-dir", str(tmp_path / "r"), option, value, str(STUCK)])
    assert result.returncode == 2 and message in result.stderr
    assert not (tmp_path / "r").exists()
    env = noderun(["run", "--run-dir", str(tmp_path / "r"), str(STUCK)],
                  **{f"NODERUN_{option[2:].upper().replace('-', '_')}": value})  # fmt: skip
    assert env.returncode == 2 and message in env.stderr


def test_submit_passes_the_stall_policy_to_the_job(tmp_path: Path) -> None:
    base = ["submit", "--dry-run", "--nodes", "2", "--run-dir", str(tmp_path / "job")]
    plain = noderun([*base, str(STUCK)])
    assert plain.returncode == 0 and "--stall-timeout" not in plain.stdout  # default: not rendered
    chosen = noderun([*base, "--stall-timeout", "60", "--on-stall", "kill", str(STUCK)])
    assert chosen.returncode == 0, chosen.stderr
    last = next(line for line in chosen.stdout.splitlines() if line.startswith("exec "))
    assert "--stall-timeout=60 --on-stall=kill" in last


@pytest.mark.slurm
def test_stacks_of_a_job_that_is_not_running() -> None:
    require_lab()
    result = noderun(["stacks", "99999999"])
    assert result.returncode == 2 and result.stderr.strip().count("\n") == 0
    assert "job 99999999 is not running" in result.stderr
