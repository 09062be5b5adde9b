"""Helpers for tests on the real Slurm lab (tests/slurm/lab/up.sh -n 3 -a; `make lab` starts it)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from noderun.backends import slurm
from noderun.backends.slurm import JobState, wait_for_job
from tests.conftest import ROOT, clean_env, under_ci

WORKLOADS = Path(__file__).parent / "workloads"
CLASSIFIER = ROOT / "examples" / "ddp_classifier.py"
PYTHON = sys.executable


START = "make lab (sudo tests/slurm/lab/up.sh -n 3 -a)"


@cache
def lab_missing() -> str | None:
    """Why the 3-node lab with accounting cannot be used here, or None (asked once a session)."""
    for tool in ("sinfo", "sbatch", "srun", "salloc", "sacct", "scontrol"):
        if shutil.which(tool) is None:
            return f"no {tool} here (no Slurm client); start the lab: {START}"
    try:
        nodes = subprocess.run(
            ["sinfo", "-h", "-N", "-o", "%N"], capture_output=True, text=True, timeout=30
        )
    except subprocess.TimeoutExpired:
        return f"sinfo did not answer in 30 s; restart the lab: {START}"
    if nodes.returncode != 0 or len(set(nodes.stdout.split())) < 3:
        return f"the Slurm lab is not running with 3 nodes; start it: {START}"
    return None


def require_lab() -> None:
    """Skip without the lab; under CI (CI=true) a missing lab fails the test instead."""
    why = lab_missing()
    if why:
        if under_ci():
            pytest.fail(f"CI=true and {why}", pytrace=False)
        pytest.skip(why)


def job_id_of(stdout: str) -> str:
    match = re.search(r"submitted job (\d+)", stdout)
    assert match, stdout
    return match.group(1)


def wait(job_id: str) -> JobState:
    return wait_for_job(job_id, poll=0.5)


def job_nodes(job_id: str) -> tuple[str, list[str]]:
    """The nodes the lab gave a job, as sacct lists them (``node[2-3]``) and one by one: the
    lanes share the lab, so a job's nodes are not always the first ones."""
    listed = subprocess.run(
        ["sacct", "-j", job_id, "-X", "-n", "-P", "--format=NodeList"],
        capture_output=True, text=True, check=True,
    ).stdout.strip().splitlines()[0]  # fmt: skip
    hosts = slurm.hostnames(listed)
    return listed, hosts


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
