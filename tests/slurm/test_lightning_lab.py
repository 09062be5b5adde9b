"""Lightning on the real Slurm lab: srun mode through `noderun submit`, `noderun run` inside an
allocation, and seed 002's mistake (bare python, --ntasks-per-node=2) named while it hangs."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, clean_env, cli, noderun
from tests.docs.test_snippets import run_snippet_of
from tests.slurm.lab import PYTHON, require_lab

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
pytest.importorskip("lightning", reason="the Lightning example needs noderun[lightning]")

EXAMPLE = ROOT / "examples" / "lightning_classifier.py"


@pytest.fixture(autouse=True)
def _lab() -> None:
    require_lab()


def _trained(run_dir: Path, output: str, world: int) -> None:
    """Lightning's own lines on the console and in this run's rank logs, its CSV, verify."""
    logs = [(run_dir / "logs" / f"rank{rank}.log").read_text() for rank in range(world)]
    started = f"All distributed processes registered. Starting with {world} processes"
    assert started in output and started in logs[0]
    for rank in range(world):
        member = f"GLOBAL_RANK: {rank}, MEMBER: {rank + 1}/{world}"
        assert member in output and member in logs[rank]
    (metrics,) = run_dir.glob("lightning_logs/version_*/metrics.csv")
    assert "val_accuracy" in metrics.read_text().splitlines()[0]
    verified = cli(["verify", str(run_dir)])
    assert verified.returncode == 0 and "verdict: HEALTHY" in verified.stdout, verified.stdout


def test_submit_srun_mode_and_run_inside_salloc(tmp_path: Path) -> None:
    """docs/lightning.md's two commands, run as written (that page's lab test runs them only
    here), one after the other: each run is judged from its own rank logs and run dir."""
    result = run_snippet_of(  # noderun submit --mode srun --wait; salloc noderun run: exit 0
        "docs/lightning.md",
        "tests/slurm/test_lightning_lab.py::test_submit_srun_mode_and_run_inside_salloc",
        tmp_path,
    )
    output = result.stdout + result.stderr
    _trained(tmp_path / "runs" / "srun", output, 4)
    srun_rank0 = (tmp_path / "runs" / "srun" / "logs" / "rank0.log").read_text()
    assert "SLURM auto-requeueing enabled" in srun_rank0  # Lightning saw SLURM's ranks
    assert "SLURM auto-requeueing enabled" in output
    _trained(tmp_path / "runs" / "salloc", output, 4)


def test_a_trainer_shape_other_than_the_allocation_is_one_line(tmp_path: Path) -> None:
    result = noderun(
        ["submit", "--wait", "--mode", "srun", "--nodes", "2", "--nproc-per-node", "1",
         "--time", "5", "--run-dir", str(tmp_path / "r"), str(EXAMPLE), "--num-nodes", "1"],
        timeout=300,
        cwd=ROOT,
    )  # fmt: skip
    assert result.returncode != 0
    assert "--num-nodes 1 but the launcher started 2 node(s) x 1 process(es)" in result.stdout


def test_seed_002_missing_srun_is_named_while_the_job_hangs(tmp_path: Path) -> None:
    script = tmp_path / "seed002.sbatch"
    script.write_text(
        "#!/bin/bash\n#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=2\n#SBATCH --time=5\n"
        f"#SBATCH --output={tmp_path}/slurm-%j.out\n"
        f"export NODERUN_RUN_DIR={tmp_path}/run\n"
        f"{PYTHON} {EXAMPLE} --num-nodes 2 --devices 2\n"
    )
    assert cli(["check", str(script)]).returncode == 1  # caught before submitting, too
    started = time.monotonic()
    sbatch = subprocess.run(
        ["sbatch", str(script)], capture_output=True, text=True, cwd=ROOT, env=clean_env()
    )
    job_id = re.search(r"(\d+)", sbatch.stdout).group(1)  # type: ignore[union-attr]
    try:
        diagnosis = None
        while time.monotonic() - started < 90:
            result = cli(["explain", "--quiet-for", "10", job_id])
            if "root cause: missing-launcher: hanging at start-up" in result.stdout:
                diagnosis = time.monotonic() - started
                break
            time.sleep(2)
        assert diagnosis is not None, result.stdout + result.stderr
        assert diagnosis < 60
        assert "1/4 ranks started (rank 0)" in result.stdout
        assert "srun python" in result.stdout
    finally:
        subprocess.run(["scancel", job_id], check=False)
