"""On the Slurm lab: the Lightning example through `noderun submit --mode srun --wait` against
seed 002's fixed hand-written sbatch + srun of the same script, alternating in the same run
(submission to job end, queue wait excluded); then the time from submitting seed 002's mistake
(bare python, --ntasks-per-node=2) to `noderun explain JOB_ID` naming it while it hangs.

    .venv/bin/python bench/lightning_launch.py [--reps 3] [--epochs 1]

Prints every repetition, the medians, the diagnosis time, and the ratio last.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from noderun.backends.slurm import wait_for_job

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "lightning_classifier.py"
PY = sys.executable
TARGET = 1.10
DIAGNOSIS_TARGET = 60.0
SEED_002_FIXED = """#!/bin/bash
#SBATCH --job-name=lightning-hand
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=2
#SBATCH --time=5
#SBATCH --output={out}/slurm-%j.out
export NODERUN_RUN_DIR={out}
srun {py} {example} --epochs {epochs}
"""
SEED_002_MISTAKE = SEED_002_FIXED.replace("srun ", "").replace(
    "--epochs {epochs}", "--num-nodes 2 --devices 2"
)


def sbatch(script: Path) -> str:
    out = subprocess.run(["sbatch", "--parsable", str(script)], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"sbatch failed: {out.stderr.strip()}")
    return out.stdout.strip().split(";")[0]


def queued_for(job_id: str) -> float:
    """Seconds the job waits in the queue from now (shared lab), counted for neither side."""
    start = time.time()
    while True:
        state = subprocess.run(
            ["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True, text=True
        ).stdout.strip()
        if state != "PENDING":
            return time.time() - start
        time.sleep(0.05)


def time_hand_written(tmp: Path, rep: int, epochs: int) -> float:
    out = tmp / f"hand{rep}"
    out.mkdir()
    script = out / "job.sbatch"
    script.write_text(SEED_002_FIXED.format(out=out, py=PY, example=EXAMPLE, epochs=epochs))
    start = time.time()
    job_id = sbatch(script)
    queued = queued_for(job_id)
    state = wait_for_job(job_id, poll=0.1)
    if state.status != "completed":
        raise SystemExit(f"hand-written job {job_id} ended {state.state}; see {out}")
    return time.time() - start - queued


def time_noderun(tmp: Path, rep: int, epochs: int) -> float:
    start = time.time()
    proc = subprocess.Popen(
        [PY, "-m", "noderun", "submit", "--wait", "--mode=srun", "--nodes=2",
         "--nproc-per-node=2", "--time=5", f"--run-dir={tmp / f'noderun{rep}'}",
         str(EXAMPLE), "--epochs", str(epochs)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
    )  # fmt: skip
    assert proc.stdout is not None
    queued = 0.0
    for line in proc.stdout:
        if "submitted job" in line:
            queued = queued_for(line.split("submitted job", 1)[1].split()[0].strip(";,."))
    if proc.wait() != 0:
        raise SystemExit(f"noderun submit failed; see {tmp / f'noderun{rep}'}")
    return time.time() - start - queued


def time_to_diagnosis(tmp: Path) -> float:
    out = tmp / "mistake"
    out.mkdir()
    script = out / "job.sbatch"
    script.write_text(SEED_002_MISTAKE.format(out=out, py=PY, example=EXAMPLE))
    start = time.time()
    job_id = sbatch(script)
    try:
        while time.time() - start < 180:
            result = subprocess.run(
                [PY, "-m", "noderun", "explain", job_id], capture_output=True, text=True
            )
            if "hanging at start-up" in result.stdout:
                print("  " + result.stdout.splitlines()[0][:150])
                return time.time() - start
            time.sleep(1)
        raise SystemExit(f"no diagnosis within 180 s for job {job_id}")
    finally:
        subprocess.run(["scancel", job_id], check=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=1)
    args = parser.parse_args()
    ours, base = [], []
    with tempfile.TemporaryDirectory(dir=ROOT, prefix="noderun-bench-") as t:
        tmp = Path(t)
        for rep in range(args.reps):
            pair = [("hand", time_hand_written), ("noderun", time_noderun)]
            for name, timer in pair if rep % 2 == 0 else pair[::-1]:
                (base if name == "hand" else ours).append(timer(tmp, rep, args.epochs))
            print(f"rep {rep + 1}: hand-written {base[-1]:.2f} s  noderun {ours[-1]:.2f} s")
        diagnosis = time_to_diagnosis(tmp)
    med_ours, med_base = statistics.median(ours), statistics.median(base)
    print(
        f"submit -> missing-srun diagnosis (seed 002 took 3601 s): {diagnosis:.1f} s "
        f"(target <= {DIAGNOSIS_TARGET:.0f} s)"
    )
    print(
        "median submission -> job end, 2 nodes x 2 ranks, queue wait excluded: "
        f"hand-written sbatch+srun = {med_base:.2f} s, "
        f"noderun submit --mode srun = {med_ours:.2f} s"
    )
    print(f"ratio noderun/hand-written = {med_ours / med_base:.2f} (target <= {TARGET:.2f})")


if __name__ == "__main__":
    main()
