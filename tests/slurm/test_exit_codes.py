"""The SLURM path tells the same truth as the local one: a rank's refused input (exit 2) and a
preemption (every rank exits 75) end `noderun run` locally, inside an allocation and
`noderun submit --wait` with the same exit code, final line and run.json status."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.conftest import ROOT, SCRIPTS, noderun
from tests.slurm.lab import PYTHON, read_json, require_lab, salloc

SCRIPT = SCRIPTS / "exit_with.py"
CASES = {  # name: (script args, exit code, run.json status, words of the final line)
    "bad-input": (["2", "0"], 2, "failed", "the script refused its input (exit 2"),
    "preempted": (["75", "all"], 75, "preempted", "job preempted: a checkpoint was saved"),
}


def _same_truth(name: str, code: int, output: str, run_dir: Path) -> None:
    _, expected, status, words = CASES[name]
    assert code == expected, output
    assert words in output, output
    record = read_json(run_dir / "run.json")
    assert (record["status"], record["exit_code"]) == (status, expected)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CASES))
def test_local(tmp_path: Path, name: str) -> None:
    args, *_ = CASES[name]
    result = noderun(
        ["run", "--nnodes", "2", "--nproc-per-node", "2", "--run-dir", str(tmp_path / "r"),
         str(SCRIPT), *args]
    )  # fmt: skip
    _same_truth(name, result.returncode, result.stdout + result.stderr, tmp_path / "r")


@pytest.mark.slurm
@pytest.mark.slow
@pytest.mark.parametrize("mode", ["torchrun", "srun"])
def test_submit_wait_and_inside_salloc(tmp_path: Path, mode: str) -> None:
    require_lab()
    inside = {
        name: salloc(
            [
                "--nodes=2",
                f"--ntasks-per-node={2 if mode == 'srun' else 1}",
                PYTHON,
                "-m",
                "noderun",
                "run",
                f"--mode={mode}",
                "--nproc-per-node=2",
                f"--run-dir={tmp_path / ('salloc-' + name)}",
                str(SCRIPT),
                *CASES[name][0],
            ]
        )
        for name in CASES
    }
    for name, (args, *_) in CASES.items():
        run_dir = tmp_path / f"submit-{name}"
        result = noderun(
            [
                "submit",
                "--wait",
                f"--mode={mode}",
                "--nodes=2",
                "--nproc-per-node=2",
                "--time=5",
                f"--run-dir={run_dir}",
                str(SCRIPT),
                *args,
            ],
            timeout=300,
            cwd=ROOT,
        )
        _same_truth(name, result.returncode, result.stdout + result.stderr, run_dir)
    for name, proc in inside.items():
        try:
            output, _ = proc.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
        _same_truth(name, proc.returncode, output, tmp_path / f"salloc-{name}")
