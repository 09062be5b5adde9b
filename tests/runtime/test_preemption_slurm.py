"""Preemption on the real Slurm lab: `noderun submit --requeue --signal USR1@90`, then
`scancel --signal=USR1` mid-run: the ranks checkpoint, rank 0 runs `scontrol requeue`, the
job comes back (SLURM_RESTART_COUNT=1, ~25 s later on the lab), resumes with --resume auto,
ends COMPLETED, and its final weights equal an uninterrupted run's (same world size)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from noderun.backends.slurm import JobState, wait_for_job
from tests.conftest import ROOT, cli, noderun, wait_until
from tests.runtime.test_resume import assert_identical, final_state
from tests.slurm.lab import job_id_of, read_json, require_lab

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

SCRIPT = str(ROOT / "examples" / "traffic_regression.py")
# 104 steps per epoch on 2 ranks (was --batch-size 64: 414 steps, 4x the steps in the
# reference run and in the job for the same facts)
ARGS = ["--epochs", "3", "--batch-size", "256"]
LOCAL = ["run", "--nnodes", "2", "--nproc-per-node", "1"]
SUBMIT = ["submit", "--nodes", "2", "--nproc-per-node", "1", "--mode", "srun", "--requeue"]
SUBMIT += ["--signal", "USR1@90", "--time", "10"]
WAIT = "NODERUN_DEBUG_WAIT_FOR_SIGNAL"
EPOCH_2_STEP_6 = 110  # 104 steps per epoch on 2 ranks: this step() call is in epoch 2


def test_usr1_checkpoints_requeues_resumes_and_completes_identically(tmp_path: Path) -> None:
    require_lab()
    reference = tmp_path / "reference"
    local = noderun(
        [*LOCAL, "--run-dir", str(reference), SCRIPT, *ARGS],
        timeout=300,
    )
    assert local.returncode == 0, local.stdout[-2000:] + local.stderr[-2000:]

    run_dir = tmp_path / "slurm"
    submitted = noderun(
        [*SUBMIT, "--run-dir", str(run_dir), "--env", f"{WAIT}=all:{EPOCH_2_STEP_6}",
         "--env", "NODERUN_PREEMPT_CHECK_SEC=0.01",
         SCRIPT, "--resume", "auto", *ARGS],
        cwd=ROOT,
    )  # fmt: skip
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr
    job = job_id_of(submitted.stdout)
    try:
        waiting = [run_dir / "logs" / f"rank{r}.waiting-for-signal" for r in (0, 1)]
        # both ranks wait at epoch 2, step 6 for the signal
        assert wait_until(lambda: all(w.exists() for w in waiting), 240), "never reached epoch 2"
        signalled = subprocess.run(
            ["scancel", "--signal=USR1", job], capture_output=True, text=True, check=False
        )
        assert signalled.returncode == 0, signalled.stderr
        states: list[str] = []
        final = wait_for_job(
            job, poll=0.5, max_poll=0.5, on_change=lambda s: states.append(s.state)
        )
    finally:
        subprocess.run(["scancel", job], capture_output=True, check=False)
    shown = subprocess.run(
        ["scontrol", "show", "job", "-o", job], capture_output=True, text=True, check=False
    ).stdout
    log = (run_dir / "logs" / f"slurm-{job}.out").read_text()
    assert isinstance(final, JobState) and final.state == "COMPLETED", log[-3000:]
    assert "Restarts=1" in shown, shown
    running = [i for i, s in enumerate(states) if s.startswith("RUNNING")]
    assert any(s.startswith(("PENDING", "REQUEUED")) for s in states[running[0] :]), states

    # slurm-<job>.out starts afresh when the job restarts; the rank logs are appended to
    rank0 = (run_dir / "logs" / "rank0.log").read_text()
    preempted = [line for line in rank0.splitlines() if "noderun: preempted by SIGUSR1" in line]
    assert len(preempted) == 1 and "job requeued, it resumes from the checkpoint" in preempted[0]
    resumed_from = [line for line in rank0.splitlines() if "noderun: resumed from" in line]
    assert len(resumed_from) == 1 and "/checkpoints/epoch-0001-step-" in resumed_from[0], rank0
    assert "resumed from" in log  # the restarted job's own output
    assert read_json(run_dir / "run.json")["restart_count"] == 1
    # and the run is healthy: the requeue line its rank logs keep is no crash
    verified = cli(["verify", str(run_dir)])
    assert verified.returncode == 0, verified.stdout
    assert verified.stdout.splitlines()[-1] == "verdict: HEALTHY", verified.stdout
    # nor does explain take the first attempt's "srun: error: …: Terminated" for a failure
    explained = cli(["explain", str(run_dir)])
    assert "no failure found: the run finished" in explained.stdout, explained.stdout
    rows = (run_dir / "metrics.csv").read_text().splitlines()
    assert [r.split(",")[0] for r in rows[1:]] == ["1", "2", "3"]  # no epoch twice

    assert_identical(final_state(reference), final_state(run_dir))
