"""On the Slurm lab: time from submission to all ranks past init_process_group, for
`noderun submit` against a hand-written sbatch + srun + torchrun script (seed 003 kind),
alternating in the same run; then the time to diagnosis of two classic mistakes.

    .venv/bin/python bench/slurm_launch.py [--reps 5] [--nodes 2] [--nproc-per-node 2]
                                          [--hang-cap 45]

Prints every repetition, the medians, the diagnosis times, and the ratio last.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from noderun.backends.slurm import job_state, wait_for_job

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
WORKLOAD = HERE / "slurm_ready.py"
CLASSIFIER = ROOT / "examples" / "ddp_classifier.py"
PY = sys.executable
TARGET = 1.10
DIAGNOSIS_TARGET = 30.0

HAND_WRITTEN = """#!/bin/bash
#SBATCH --job-name=hand-torchrun
#SBATCH --nodes={nodes}
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task={nproc}
#SBATCH --time=5
#SBATCH --output={out}/slurm-%j.out
export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)
export MASTER_PORT=$((20000 + SLURM_JOB_ID % 10000))
srun bash -c 'exec {py} -m torch.distributed.run --nnodes=$SLURM_NNODES \\
  --nproc-per-node={nproc} --node-rank=$SLURM_NODEID --rdzv-backend=c10d \\
  --rdzv-id=$SLURM_JOB_ID --rdzv-endpoint=$MASTER_ADDR:$MASTER_PORT {workload} {ready}'
"""

MISTAKE = """#!/bin/bash
#SBATCH --job-name={name}
#SBATCH --nodes={nodes}
#SBATCH --ntasks-per-node={tasks}
#SBATCH --time=5
#SBATCH --output={out}/%x-%j.out
cd {root}
{command}
"""

HANG = """import os, socket
import torch.distributed as dist
env = os.environ
env.setdefault("RANK", env["SLURM_PROCID"])
env.setdefault("WORLD_SIZE", env["SLURM_NTASKS"])
env.setdefault("MASTER_ADDR", socket.gethostname())
env.setdefault("MASTER_PORT", str(20000 + int(env["SLURM_JOB_ID"]) % 10000))
dist.init_process_group("gloo")  # torch's default: wait 30 minutes for the absent ranks
"""


def sbatch(script: Path) -> str:
    out = subprocess.run(["sbatch", "--parsable", str(script)], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"sbatch failed: {out.stderr.strip()}")
    return out.stdout.strip().split(";")[0]


def queued_for(job_id: str, returned: float) -> float:
    """Seconds the job waited in the queue after submission returned (other users' jobs on
    the shared lab), so that they count for neither side."""
    while True:
        state = subprocess.run(
            ["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True, text=True
        ).stdout.strip()
        if state != "PENDING":
            return max(0.0, time.time() - returned)
        time.sleep(0.05)


def until_ready(ready: Path, world: int, start: float, job_id: str) -> float:
    """Seconds from ``start`` until every rank wrote its ready time, queue wait excluded."""
    queued = queued_for(job_id, time.time())
    deadline = time.time() + 300
    while len(list(ready.glob("rank*"))) < world:
        if time.time() > deadline:
            raise SystemExit(f"job {job_id}: ranks not ready after 300 s; see {ready.parent}")
        time.sleep(0.1)
    time.sleep(0.2)  # let the last writer finish its line
    latest = max(float(p.read_text()) for p in ready.glob("rank*"))
    wait_for_job(job_id)  # next repetition starts on idle nodes
    return latest - start - queued


def time_hand_written(tmp: Path, rep: int, nodes: int, nproc: int) -> float:
    out = tmp / f"hand{rep}"
    ready = out / "ready"
    ready.mkdir(parents=True)
    script = out / "job.sbatch"
    script.write_text(
        HAND_WRITTEN.format(
            nodes=nodes, nproc=nproc, out=out, py=PY, workload=WORKLOAD, ready=ready
        )
    )
    start = time.time()
    job_id = sbatch(script)
    return until_ready(ready, nodes * nproc, start, job_id)


def time_noderun(tmp: Path, rep: int, nodes: int, nproc: int) -> float:
    out = tmp / f"noderun{rep}"
    ready = tmp / f"noderun{rep}-ready"
    ready.mkdir(parents=True)
    start = time.time()
    result = subprocess.run(
        [PY, "-m", "noderun", "submit", f"--nodes={nodes}", f"--nproc-per-node={nproc}",
         "--time=5", f"--run-dir={out}", str(WORKLOAD), str(ready)],
        capture_output=True, text=True, cwd=ROOT,
    )  # fmt: skip
    match = re.search(r"submitted job (\d+)", result.stdout)
    if result.returncode != 0 or not match:
        raise SystemExit(f"noderun submit failed: {result.stderr.strip()}")
    return until_ready(ready, nodes * nproc, start, match.group(1))


def diagnose(tmp: Path, name: str, tasks: int, command: str, expect: str) -> float:
    """Seconds from submission to the end of a job that makes ``name``'s mistake."""
    script = tmp / f"{name}.sbatch"
    script.write_text(
        MISTAKE.format(name=name, nodes=2, tasks=tasks, out=tmp, root=ROOT, command=command)
    )
    start = time.time()
    job_id = sbatch(script)
    queued = queued_for(job_id, time.time())
    wait_for_job(job_id)
    elapsed = time.time() - start - queued
    text = (tmp / f"{name}-{job_id}.out").read_text()
    if expect not in text:
        raise SystemExit(f"{name}: expected {expect!r} in the job output:\n{text}")
    line = next(line for line in text.splitlines() if expect in line)
    print(f"  {name}: {line.strip()[:160]}")
    return elapsed


def hang_baseline(tmp: Path, cap: float) -> str:
    """Plain torch run without srun: still waiting after ``cap`` seconds? (cancelled then)."""
    hang = tmp / "hang.py"
    hang.write_text(HANG)
    script = tmp / "hang.sbatch"
    script.write_text(
        MISTAKE.format(name="hang", nodes=1, tasks=2, out=tmp, root=ROOT, command=f"{PY} {hang}")
    )
    job_id = sbatch(script)
    queued_for(job_id, time.time())
    deadline = time.time() + cap
    while time.time() < deadline:
        state = job_state(job_id)
        if state is not None and state.final:
            return f"ended ({state.state}) within {cap:.0f} s: see {tmp}/hang-{job_id}.out"
        time.sleep(1)
    subprocess.run(["scancel", job_id], check=False)
    return f"still hanging after {cap:.0f} s (torch default timeout: 1800 s), cancelled"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--nproc-per-node", type=int, default=2)
    parser.add_argument("--hang-cap", type=float, default=45, help="0: skip the hang baseline")
    args = parser.parse_args()
    ours, base = [], []
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        time_hand_written(tmp, -1, args.nodes, args.nproc_per_node)  # warm caches and scheduler
        for rep in range(args.reps):
            base.append(time_hand_written(tmp, rep, args.nodes, args.nproc_per_node))
            ours.append(time_noderun(tmp, rep, args.nodes, args.nproc_per_node))
            print(
                f"rep {rep + 1}: hand-written {base[-1]:.2f} s  noderun {ours[-1]:.2f} s",
                flush=True,
            )

        print("time to diagnosis (submission to job end, queue wait excluded):")
        missing = diagnose(tmp, "missing-srun", 2, f"{PY} {CLASSIFIER} --epochs 1", "without srun")
        node = f"{PY} -m noderun.node --nnodes=2 --nproc-per-node=2 --run-dir={tmp}"
        dead = diagnose(
            tmp, "dead-node", 1, f"srun -N1 -n1 --label {node} -- {WORKLOAD} {tmp}",
            "never arrived",
        )  # fmt: skip
        hang = hang_baseline(tmp, args.hang_cap) if args.hang_cap > 0 else "not run"
    med_ours, med_base = statistics.median(ours), statistics.median(base)
    print(
        f"time to diagnosis: missing srun {missing:.1f} s, dead node {dead:.1f} s "
        f"(target <= {DIAGNOSIS_TARGET:.0f} s)"
    )
    print(f"plain torch without srun (baseline): {hang}")
    print(
        f"median submission -> all {args.nodes * args.nproc_per_node} ranks initialized "
        "(queue wait excluded): "
        f"hand-written sbatch+srun+torchrun = {med_base:.2f} s, noderun submit = {med_ours:.2f} s"
    )
    print(f"ratio noderun/hand-written = {med_ours / med_base:.2f} (target <= {TARGET:.2f})")


if __name__ == "__main__":
    main()
