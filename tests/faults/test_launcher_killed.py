"""Fault: the launcher itself SIGKILLed (an OOM killer, a CI timeout). Nothing it started may
outlive it, and the run directory must say the launcher died, not ``running``.

Seen failing before proc_guard: both torchrun agents and all four ranks were still running
(six processes) minutes after the kill, and verify said "still running, or the launcher died".
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.conftest import SCRIPTS, clean_env, cli, processes_running, run_args

pytestmark = pytest.mark.slow


def _wait_for(predicate: object, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(0.1)
    return False


def test_sigkilled_launcher_leaves_nothing_running(tmp_path: Path) -> None:
    script = tmp_path / f"gang_{tmp_path.name}.py"
    shutil.copy(SCRIPTS / "gang.py", script)
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "noderun", *run_args(script, run_dir)],
        env=clean_env(GANG_MODE="hang"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        # every rank is up once each wrote its line: the 2 agents and 4 ranks exist
        assert _wait_for(lambda: len(processes_running(str(script))) >= 7, 120), "never started"
        tree = psutil.Process(proc.pid).children(recursive=True)
        assert len(tree) >= 6, tree
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    _, alive = psutil.wait_procs(tree, timeout=5)
    assert not [p for p in alive if p.status() != psutil.STATUS_ZOMBIE], alive
    assert not processes_running(str(script))

    record = json.loads((run_dir / "run.json").read_text())
    assert record["status"] == "running"  # nobody could finish it: the readers must say why
    verified = cli(["verify", str(run_dir), "--skip=checkpoint", "--skip=metrics"])
    assert verified.returncode != 0
    assert f"the launcher (pid {proc.pid} on {os.uname().nodename}) died" in verified.stdout
    explained = cli(["explain", str(run_dir)])
    assert f"pid {proc.pid}" in explained.stdout + explained.stderr, explained.stdout
