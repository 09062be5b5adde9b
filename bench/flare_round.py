"""Wall time per FL round of the digits example's multi-node site (2 nodes x 2 ranks) in FLARE's
simulator, against the same local training steps run by noderun without FLARE, in the same run.

    .venv/bin/python bench/flare_round.py [--rounds 5] [--epochs 4]

The FLARE job has site-1 alone (min_clients=1), so a round is the site's work plus FLARE's own
cost, not waiting for a slower peer. Where the overhead goes, from the site's round timings
(noderun.flare.FederatedSite): model exchange (rank 0 waiting for the task: server
aggregation and the model download; then the result upload), the broadcast of the weights to
every rank, and the one-off start-up (launch to first task vs launch to first step).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
SITE = HERE / "flare_site.py"
TARGET = 1.25


def local_run(work: Path, rounds: int, epochs: int) -> tuple[list[float], float]:
    """Per-round training seconds and launch-to-first-step seconds, noderun without FLARE."""
    run_dir = work / "local"
    argv = [sys.executable, "-m", "noderun", "run", "--nnodes", "2", "--nproc-per-node", "2"]
    script = [str(SITE), "--no-flare", "--rounds", str(rounds), "--epochs", str(epochs)]
    launched = time.time()
    subprocess.run(
        [*argv, "--run-dir", str(run_dir), *script],
        check=True,
        capture_output=True,
    )
    record = json.loads((run_dir / "local_rounds.json").read_text())
    runtime = json.loads((run_dir / "runtime.json").read_text())
    startup = record["started_at"] - launched + runtime["init_seconds"]
    return [r["train_s"] for r in record["rounds"]], startup


def flare_run(work: Path, rounds: int, epochs: int) -> tuple[list[dict[str, float]], float, float]:
    """Site-1's round timings, its launch-to-first-task seconds and flare.init seconds."""
    sys.path.insert(0, str(HERE.parent / "examples" / "flare"))
    from digits_data import Net

    from noderun.flare import FedAvgJob, Site

    job = FedAvgJob(
        "bench",
        model=Net(),
        script=SITE,
        files=[HERE.parent / "examples" / "flare" / f for f in ("digits_data.py", "digits.py")],
        num_rounds=rounds,
        sites=[Site("site-1", nnodes=2, nproc_per_node=2, args=f"--epochs {epochs}")],
    )
    job.simulate(work / "ws")
    site_dir = next((work / "ws").rglob("runs/site-1-*"))
    timings = json.loads((site_dir / "flare_rounds.json").read_text())
    run = json.loads((site_dir / "run.json").read_text())
    launched = datetime.fromisoformat(run["start_time"]).timestamp()
    first_task = timings["rounds"][0]["task_at"]
    return timings["rounds"], first_task - launched, timings["init_s"]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=4, help="local epochs per round")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="noderun-bench-flare-") as tmp:
        work = Path(tmp)
        local, local_startup = local_run(work, args.rounds, args.epochs)
        rounds, flare_startup, init_s = flare_run(work, args.rounds, args.epochs)
    # round 0's wait is the launch itself (first task): counted under start-up, not per round
    steady = rounds[1:] or rounds
    full = [r["wait_s"] + r["broadcast_s"] + r["train_s"] + r["send_s"] for r in steady]
    flare_round = statistics.median(full)
    local_round = statistics.median(local)
    parts = {
        "model exchange: wait for task (aggregate + download)": [r["wait_s"] for r in steady],
        "model exchange: send result (reduce + upload)": [r["send_s"] for r in steady],
        "  of which metrics all-reduce over 4 ranks": [r["reduce_s"] for r in steady],
        "broadcast weights to 4 ranks": [r["broadcast_s"] for r in steady],
        "local training (inside the FL round)": [r["train_s"] for r in steady],
    }
    print(f"site-1: 2 nodes x 2 ranks, {args.epochs} local epochs per round, {args.rounds} rounds")
    print(f"{'':<56}{'median s':>10}")
    print(f"{'round without FLARE (same steps, noderun run)':<56}{local_round:>10.3f}")
    print(f"{'FL round (task wait + broadcast + train + send)':<56}{flare_round:>10.3f}")
    for name, values in parts.items():
        print(f"  {name:<54}{statistics.median(values):>10.3f}")
    overhead = flare_round - local_round
    print(f"{'round overhead':<56}{overhead:>10.3f}")
    print(f"{'start-up: launch -> first step, without FLARE':<56}{local_startup:>10.3f}")
    print(f"{'start-up: launch -> first task, FLARE site':<56}{flare_startup:>10.3f}")
    print(f"  {'of which flare.init on rank 0':<54}{init_s:>10.3f}")
    ratio = flare_round / local_round
    noderun_part = statistics.median(r["broadcast_s"] + r["reduce_s"] for r in steady)
    flare_wait = statistics.median(parts["model exchange: wait for task (aggregate + download)"])
    print(
        f"ratio flare/local per round = {ratio:.2f} (target <= {TARGET:.2f}; overhead "
        f"{overhead:.2f} s/round: FLARE's task wait {flare_wait:.2f} s, noderun's broadcast + "
        f"reduce {noderun_part:.3f} s)"
    )


if __name__ == "__main__":
    main()
