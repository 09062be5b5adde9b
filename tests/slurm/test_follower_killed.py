"""Fault table: ``noderun submit --wait`` (the follower) SIGKILLed. The SLURM job itself keeps
running and stays manageable: squeue shows it, scancel ends it, the run dir holds the job id."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from noderun.backends import slurm
from tests.conftest import ROOT, SCRIPTS, clean_env
from tests.slurm.lab import require_lab, wait

pytestmark = [pytest.mark.slow, pytest.mark.slurm]


def test_a_killed_follower_leaves_the_job_running_and_manageable(tmp_path: Path) -> None:
    require_lab()
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "noderun", "submit", "--wait", "--nodes", "1",
         "--nproc-per-node", "1", "--time", "5", "--run-dir", str(run_dir),
         str(SCRIPTS / "secret_probe.py")],
        cwd=ROOT, env=clean_env(SECRET_PROBE_SLEEP="300"), stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert "submitted job" in line, line
    job_id = line.split("submitted job ", 1)[1].split(";")[0].strip()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (run_dir / "probe_ready_0").exists():
        time.sleep(0.5)
    assert (run_dir / "probe_ready_0").exists(), "the job never ran"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    time.sleep(2)  # the follower gone: the job must not notice
    state = slurm.job_state(job_id)
    assert state is not None and state.status == "running", state
    subprocess.run(["scancel", job_id], check=True)
    ended = wait(job_id)
    assert ended.status in ("cancelled", "failed"), ended
    assert json.loads((run_dir / "run.json").read_text())["job_id"] == job_id
