"""`noderun sweep` bad input: one line, exit 2, nothing created or submitted."""

from __future__ import annotations

from pathlib import Path

import pytest

from noderun.backends import slurm
from tests.conftest import ROOT, cli

SCRIPT = str(ROOT / "tests" / "scripts" / "plain_ddp.py")


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--param", "lr"], "has no '='"),
        (["--param", "lr="], "empty value"),
        (["--param", "9lr=1"], "not an identifier"),
        ([], "at least one --param"),
        (["--param", "lr=1", "--partition", "debug"], "--partition only apply to --submit"),
        (["--param", "lr=1", "--max-parallel", "0"], "--max-parallel"),
    ],
)
def test_bad_input_is_one_line_exit_2(tmp_path: Path, args: list[str], words: str) -> None:
    out = tmp_path / "s"
    result = cli(["sweep", *args, "--out", str(out), SCRIPT])
    assert result.returncode == 2, result.stderr
    assert words in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not out.exists()


def test_more_points_than_max_array_size_submits_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(slurm, "require_command", lambda name: name)
    monkeypatch.setattr(slurm, "max_array_size", lambda: 3)
    monkeypatch.setattr(slurm, "sbatch", lambda script: pytest.fail("submitted"))
    out = tmp_path / "s"
    result = cli(["sweep", "--submit", "--param", "a=1,2", "--param", "b=1,2", "--out", str(out),
                  SCRIPT])  # fmt: skip
    assert result.returncode == 2
    assert "4 points but this cluster's MaxArraySize is 3" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not out.exists()


def test_submit_hands_notify_to_the_jobs_own_launcher(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from noderun.verbs import submit

    monkeypatch.setattr(submit.shutil, "which", lambda name: None)  # no cluster to ask
    result = cli(["submit", "--dry-run", "--run-dir", str(tmp_path / "r"),
                  "--notify", "mail -s 'run ended' me", SCRIPT])  # fmt: skip
    assert result.returncode == 0, result.stderr
    launch = next(line for line in result.stdout.splitlines() if line.startswith("exec "))
    assert "'--notify=mail -s '\"'\"'run ended'\"'\"' me'" in launch
