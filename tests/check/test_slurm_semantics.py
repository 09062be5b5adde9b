"""The Slurm and bash behaviour noderun check's rules rest on, measured on the lab (Slurm 22.05):
each script below is one the linter flags, and the job shows the failure the finding names."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from noderun.check import Severity, lint_sbatch
from tests.conftest import clean_env
from tests.slurm.lab import require_lab

pytestmark = pytest.mark.slurm


def sbatch_wait(script: Path, timeout: float = 120) -> str:
    """Submit ``script`` from its folder and wait for its end; sacct's state of the job."""
    out = subprocess.run(
        ["sbatch", "--parsable", "--wait", str(script)],
        cwd=script.parent, capture_output=True, text=True, timeout=timeout, env=clean_env(),
    )  # fmt: skip
    job = out.stdout.strip().split(";")[0]
    assert job.isdigit(), out.stderr
    state = subprocess.run(
        ["sacct", "-n", "-X", "-P", "-j", job, "--format=State"],
        capture_output=True, text=True, env=clean_env(),
    )  # fmt: skip
    return state.stdout.strip()


def codes(text: str, folder: Path) -> dict[str, Severity]:
    found = lint_sbatch(text, script_path=folder / "job.sh", submit_dir=folder)
    return {f.code: f.severity for f in found}


def test_output_folder_missing_fails_the_job_with_no_output(tmp_path: Path) -> None:
    require_lab()
    text = "#!/bin/bash\n#SBATCH --output=logs/%j.out\n#SBATCH --time=1\nmkdir -p logs\necho hi\n"
    assert codes(text, tmp_path)["output-dir-missing"] is Severity.ERROR
    script = tmp_path / "job.sh"
    script.write_text(text)
    assert sbatch_wait(script) == "FAILED"
    assert not (tmp_path / "logs").exists()  # the script never ran


def test_batch_shell_values_and_unexported_variables(tmp_path: Path) -> None:
    require_lab()
    text = (
        "#!/bin/bash\n#SBATCH --nodes=2\n#SBATCH --output=out.txt\n#SBATCH --time=1\n"
        "X=5\n"
        "srun bash -c 'echo unexported=[$X]'\n"
        'srun bash -c "echo batch=$SLURM_NODEID task=\\$SLURM_NODEID"\n'
    )
    found = codes(text, tmp_path)
    assert found["unexported-variable"] is Severity.ERROR
    assert found["expands-in-batch-shell"] is Severity.ERROR
    script = tmp_path / "job.sh"
    script.write_text(text)
    assert sbatch_wait(script) == "COMPLETED"
    lines = (tmp_path / "out.txt").read_text().split()
    assert lines.count("unexported=[]") == 2
    assert sorted(w for w in lines if w.startswith("batch=")) == ["batch=0", "batch=0"]
    assert sorted(w for w in lines if w.startswith("task=")) == ["task=0", "task=1"]


def test_srun_ntasks_per_node_against_the_job_tasks(tmp_path: Path) -> None:
    require_lab()
    text = (
        "#!/bin/bash\n#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=2\n#SBATCH --output=out.txt\n"
        "#SBATCH --time=1\n"
        "srun --ntasks-per-node=1 hostname\n"
        "echo ---\n"
        "srun -N 2 -n 2 --ntasks-per-node=1 hostname\n"
    )
    script = tmp_path / "job.sh"
    script.write_text(text)
    assert sbatch_wait(script) == "COMPLETED"
    first, second = (tmp_path / "out.txt").read_text().split("---")
    assert "can't honor --ntasks-per-node" in first
    assert len(re.findall(r"^node\d+$", first, re.M)) == 4  # ignored: the job's 2 per node
    assert len(re.findall(r"^node\d+$", second, re.M)) == 2
