"""Fault: two ``noderun run`` started on one run directory at the same moment: exactly one runs.

Seen failing before the flock: the lock was a pid written after a check, so both passed the check
and both launched into the same directory."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from noderun import rundir
from tests.conftest import SCRIPTS, clean_env, run_args


def test_a_held_lock_refuses_a_second_taker_in_another_process(tmp_path: Path) -> None:
    rundir.take_lock(tmp_path)
    try:
        code = (
            "import sys; from pathlib import Path; from noderun import rundir\n"
            "from noderun.errors import UsageError\n"
            "try: rundir.take_lock(Path(sys.argv[1]))\n"
            "except UsageError as e: print(e); sys.exit(3)\n"
        )
        other = subprocess.run(
            [sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True
        )
        assert other.returncode == 3, other.stdout + other.stderr
        assert f"in use by a live noderun (pid {os.getpid()}" in other.stdout
        assert rundir.stale_lock(tmp_path) is None
    finally:
        rundir.release_lock(tmp_path)
    assert not (tmp_path / rundir.LOCK).exists()


def test_a_lock_whose_holder_died_is_stale_and_can_be_taken(tmp_path: Path) -> None:
    code = "import sys; from pathlib import Path; from noderun import rundir; " \
        "rundir.take_lock(Path(sys.argv[1])); print('taken', flush=True)"  # fmt: skip
    subprocess.run([sys.executable, "-c", code, str(tmp_path)], check=True, capture_output=True)
    assert "died without finishing run.json" in (rundir.stale_lock(tmp_path) or "")
    assert rundir.lock_owner(tmp_path) is None
    rundir.take_lock(tmp_path)
    rundir.release_lock(tmp_path)
    with pytest.raises(FileNotFoundError):
        (tmp_path / rundir.LOCK).read_text()


@pytest.mark.slow
def test_two_runs_started_at_once_on_one_run_dir_exactly_one_runs(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    argv = [sys.executable, "-m", "noderun", *run_args(SCRIPTS / "gang.py", run_dir, 1, 1)]
    procs = [
        subprocess.Popen(argv, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
        for _ in range(2)
    ]  # fmt: skip
    results = [(p.wait(timeout=180), *p.communicate()) for p in procs]
    codes = sorted(code for code, _, _ in results)
    assert codes == [0, 2], results
    refused = next(err for code, _, err in results if code == 2)
    assert "in use by a live noderun" in refused or "is not empty" in refused, refused
    assert refused.count("\n") == 1  # one line
