"""Helpers for tests on the real Slurm lab (../shared/slurm-lab, `up.sh -n 3 -a`)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from noderun.backends.slurm import JobState, wait_for_job
from tests.conftest import ROOT, clean_env

WORKLOADS = Path(__file__).parent / "workloads"
CLASSIFIER = ROOT / "examples" / "ddp_classifier.py"
PYTHON = sys.executable


def require_lab() -> None:
    if shutil.which("sinfo") is None:
        pytest.skip("no Slurm client here; start the lab with ../shared/slurm-lab/up.sh -n 3 -a")
    nodes = subprocess.run(["sinfo", "-h", "-N", "-o", "%N"], capture_output=True, text=True)
    if nodes.returncode != 0 or len(set(nodes.stdout.split())) < 3:
        pytest.skip("the Slurm lab needs 3 nodes: ../shared/slurm-lab/up.sh -n 3 -a")


def job_id_of(stdout: str) -> str:
    match = re.search(r"submitted job (\d+)", stdout)
    assert match, stdout
    return match.group(1)


def wait(job_id: str) -> JobState:
    return wait_for_job(job_id, poll=0.5)


def read_json(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def contract_lines(run_dir: Path, rank: int) -> list[dict[str, Any]]:
    """What plain_contract.py printed on ``rank``, from that rank's own log file."""
    text = (run_dir / "logs" / f"rank{rank}.log").read_text()
    return [
        json.loads(line[len("CONTRACT ") :])
        for line in text.splitlines()
        if line.startswith("CONTRACT ")
    ]


def salloc(args: list[str], timeout: float = 240) -> subprocess.Popen[str]:
    """``salloc ARGS`` started now, run from the project root with a clean environment."""
    return subprocess.Popen(
        ["salloc", "--time=5", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
        env=clean_env(),
    )
