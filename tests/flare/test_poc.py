"""FLARE's POC mode: server and 2 clients as real processes started by FLARE's own commands."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, clean_env, processes_running

EXAMPLE = ROOT / "examples" / "flare" / "digits_fedavg.py"
pytestmark = pytest.mark.slow


def test_example_in_poc_mode_finishes_and_stops_everything(tmp_path: Path) -> None:
    poc, out = tmp_path / "poc", tmp_path / "out"
    result = subprocess.run(
        [sys.executable, str(EXAMPLE), "--env", "poc", "--rounds", "2", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=290,
        cwd=tmp_path,
        env=clean_env(NVFLARE_POC_WORKSPACE=str(poc)),
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "POC job status: FINISHED:COMPLETED" in result.stdout
    left = processes_running(str(poc)) + processes_running(str(out))
    assert not left, [p.cmdline() for p in left]  # server, clients, jobs and ranks all gone
    startup = list(poc.rglob("site-1/startup/start.sh"))
    assert startup, "POC kits were not prepared by FLARE"
    with (out / "site-1.csv").open() as f:
        assert [(r["round"], r["world_size"]) for r in csv.DictReader(f)] == [
            ("0", "4"),
            ("1", "4"),
        ]
    with (out / "global_accuracy.csv").open() as f:
        assert len(list(csv.DictReader(f))) == 3
    site_runs = [json.loads(p.read_text()) for p in poc.rglob("runs/site-*/run.json")]
    assert sorted(r["topology"]["world_size"] for r in site_runs) == [1, 4]
    assert {r["status"] for r in site_runs} == {"completed"}
