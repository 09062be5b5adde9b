"""`noderun sweep --submit` on the Slurm lab: 3 points x 2 nodes as one job array; one point
fails (explain's cause in the table), one is preempted (SIGUSR1 to its task) and requeues
alone, checkpointed and resumed; the others run once. --notify hears every end and the
requeue from inside the jobs. Each task's run.json names it `<array>_<task>`, and `noderun
status/logs/cancel` find a task's point by that id."""

from __future__ import annotations

import csv
import json
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ROOT, cli, start_noderun, wait_until
from tests.slurm.lab import require_lab

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

POINT = str(ROOT / "tests" / "scripts" / "sweep_point.py")


def _restarts(task: str) -> str:
    shown = subprocess.run(
        ["scontrol", "show", "job", "-o", task], capture_output=True, text=True, check=False
    ).stdout
    return next((w.split("=")[1] for w in shown.split() if w.startswith("Restarts=")), "?")


def test_a_job_array_sweep_requeues_only_the_preempted_task(tmp_path: Path) -> None:
    require_lab()
    out, notes = tmp_path / "sweep", tmp_path / "notes"
    notes.mkdir()
    sweep = start_noderun(
        ["sweep", "--submit", "--param", "mode=ok,fail,preempt", "--nnodes", "2",
         "--max-parallel", "3", "--time", "10", "--out", str(out),
         "--notify", f'cat > "$(mktemp -p {notes})"', POINT]
    )  # fmt: skip
    job = ""
    try:
        waiting = [out / "mode=preempt" / "logs" / f"rank{r}.waiting-for-signal" for r in (0, 1)]
        assert wait_until(lambda: all(w.exists() for w in waiting), timeout=300), "never paused"
        job = json.loads((out / "sweep.json").read_text())["job_id"]
        status = cli(["status", "--json", f"{job}_2"])
        seen = json.loads(status.stdout)
        assert (seen["run_dir"], seen["job"]["state"]) == (str(out / "mode=preempt"), "RUNNING")
        signalled = subprocess.run(
            ["scancel", "--signal=USR1", f"{job}_2"], capture_output=True, text=True
        )
        assert signalled.returncode == 0, signalled.stderr
        stdout, _ = sweep.communicate(timeout=300)
    finally:
        if sweep.poll() is None:
            sweep.kill()
        if job:
            subprocess.run(["scancel", job], capture_output=True, check=False)
    assert sweep.returncode == 1, stdout
    with (out / "sweep.csv").open() as f:
        rows = {row["point"]: row for row in csv.DictReader(f)}
    assert {p: (r["status"], r["verify"]) for p, r in rows.items()} == {
        "mode=ok": ("completed", "healthy"),
        "mode=fail": ("failed", "unhealthy"),
        "mode=preempt": ("completed", "healthy"),
    }, stdout
    assert rows["mode=fail"]["cause"].startswith("rank-crashed: ") and rows["mode=ok"]["step"]
    assert "sweep_point: deliberate failure" in rows["mode=fail"]["cause"]
    assert [_restarts(f"{job}_{i}") for i in range(3)] == ["0", "0", "1"]
    assert [rows[f"mode={m}"]["job_id"] for m in ("ok", "fail", "preempt")] == [
        f"{job}_0", f"{job}_1", f"{job}_2"]  # fmt: skip
    assert f"task {job}_2 (mode=preempt) PENDING" in stdout  # requeued, then ran again
    assert [json.loads((out / f"mode={m}" / "run.json").read_text())["job_id"]
            for m in ("ok", "fail", "preempt")] == [f"{job}_0", f"{job}_1", f"{job}_2"]  # fmt: skip
    shown = cli(["logs", f"{job}_1", "--rank", "1", "--grep", "deliberate failure"])
    assert shown.returncode == 0 and "deliberate failure" in shown.stdout, shown
    again = cli(["cancel", f"{job}_0"])  # found, and refused: nothing left to cancel
    assert again.returncode == 2 and "already ended (completed)" in again.stderr, again.stderr
    rank0 = (out / "mode=preempt" / "logs" / "rank0.log").read_text()
    assert "job requeued, it resumes from the checkpoint" in rank0
    assert "noderun: resumed from" in rank0
    # --notify from inside the jobs: each point's end, the requeue, then the sweep's own
    sent = sorted(
        (str(n["event"]), Path(str(n.get("run_dir") or n.get("out"))).name)
        for n in (json.loads(p.read_text()) for p in notes.iterdir())
    )
    assert sent == [("end", "mode=ok"), ("end", "mode=preempt"), ("failure", "mode=fail"),
                    ("preemption", "mode=preempt"), ("sweep_failure", "sweep")], sent  # fmt: skip
