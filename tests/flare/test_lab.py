"""The Slurm lab end to end: one sbatch job runs FLARE's server and both clients; site-1's
client trains across 2 lab nodes through srun (noderun run inside the allocation)."""

from __future__ import annotations

import csv
import json
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ROOT, clean_env, processes_running
from tests.slurm.lab import PYTHON, job_nodes, require_lab, wait

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
SBATCH = ROOT / "examples" / "flare" / "lab.sbatch"


def test_one_batch_job_runs_server_clients_and_a_two_node_site(tmp_path: Path) -> None:
    require_lab()
    poc, out = tmp_path / "poc", tmp_path / "out"
    submitted = subprocess.run(
        [
            "sbatch",
            "--parsable",
            f"--chdir={ROOT}",
            f"--output={tmp_path}/job-%j.out",
            str(SBATCH),
            "--rounds",
            "2",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        env=clean_env(PYTHON=PYTHON, NVFLARE_POC_WORKSPACE=str(poc)),
        check=True,
    )
    job_id = submitted.stdout.strip().split(";")[0]
    state = wait(job_id)  # polls scontrol until the job is final
    output = next(tmp_path.glob("job-*.out")).read_text()
    assert state.state == "COMPLETED", output[-4000:]
    assert "POC job status: FINISHED:COMPLETED" in output
    # FLARE's scheduler waited for both clients to register before it started the job
    assert "connected sites" in output or "scheduled" in output
    runs = {p.parent.name.rsplit("-", 2)[0]: p.parent for p in poc.rglob("runs/site-*/run.json")}
    site1 = json.loads((runs["site-1"] / "run.json").read_text())
    assert site1["status"] == "completed" and site1["backend"] == "slurm", site1
    listed, hosts = job_nodes(job_id)  # whichever two the shared lab gave it
    assert len(hosts) == 2, listed
    assert site1["launch"] == "srun" and site1["hosts"] == hosts
    runtime = json.loads((runs["site-1"] / "runtime.json").read_text())
    assert runtime["world_size"] == 4 and sorted(set(runtime["rank_hosts"])) == hosts
    site2 = json.loads((runs["site-2"] / "run.json").read_text())
    assert site2["backend"] == "local" and site2["topology"]["world_size"] == 1
    with (out / "site-1.csv").open() as f:
        assert [(r["round"], r["world_size"]) for r in csv.DictReader(f)] == [
            ("0", "4"),
            ("1", "4"),
        ]
    # what the job computes after the federated run (the global model's curve, each site
    # trained alone, the plot) is the example's result: read it rather than pay for it unread
    with (out / "site-1.csv").open() as f:
        received = [float(r["accuracy"]) for r in csv.DictReader(f)]
    with (out / "global_accuracy.csv").open() as f:
        curve = [
            (r["rounds_aggregated"], float(r["global_test_accuracy"])) for r in csv.DictReader(f)
        ]
    assert [r for r, _ in curve] == ["0", "1", "2"] and [a for _, a in curve[:2]] == received
    summary = json.loads((out / "summary.json").read_text())
    assert summary["federated"] == curve[-1][1], (summary, curve)
    assert summary["federated"] > max(summary["site-1_alone"], summary["site-2_alone"]), summary
    assert f"federated {summary['federated']:.3f} vs site-1 alone" in output
    assert (out / "global_accuracy.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    left = processes_running(str(poc)) + processes_running(str(out))
    assert not left, [p.cmdline() for p in left]
