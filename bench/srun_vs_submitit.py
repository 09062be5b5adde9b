"""On the Slurm lab: submit -> done of a 2 nodes x 2 tasks init + all_reduce job, for
`noderun submit --mode srun --wait` against submitit's AutoExecutor with
TorchDistributedEnvironment (one Python per task under srun, result polled), alternating
in the same run. Queue time caused by other users' jobs counts for neither side: both are
timed from submission to the caller knowing the job's result.

    .venv/bin/python bench/srun_vs_submitit.py [--reps 15] [--nodes 2] [--tasks-per-node 2]

Prints every pair, the medians, noderun's stage timeline of its last job, and the ratio last.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bytecode import compile_noderun

HERE = Path(__file__).resolve().parent
WORKLOAD = HERE / "allreduce_once.py"
PY = sys.executable
TARGET = 1.00


def allreduce_once() -> int:
    """submitit's side of the same work: its environment, then what allreduce_once.py does."""
    import submitit
    import torch
    import torch.distributed as dist

    submitit.helpers.TorchDistributedEnvironment().export(set_cuda_visible_devices=False)
    dist.init_process_group("gloo")
    value = torch.ones(1)
    dist.all_reduce(value)
    world = dist.get_world_size()
    dist.destroy_process_group()
    return int(value.item()) == world


class SideFailed(Exception):
    """One job of one side failed for a reason of its own: the pair is measured again."""


def time_submitit(folder: Path, nodes: int, tasks: int) -> float:
    import submitit

    executor = submitit.AutoExecutor(folder=folder, cluster="slurm")
    executor.update_parameters(
        nodes=nodes, tasks_per_node=tasks, cpus_per_task=1, timeout_min=3, name="bench-submitit"
    )
    start = time.perf_counter()
    job = executor.submit(allreduce_once)
    try:
        results = job.results()
    except Exception as err:  # submitit's FailedJobError, UncompletedJobError
        # its MASTER_PORT is drawn from the job id and can meet a port in use (EADDRINUSE
        # seen on the lab): rank 0 fails, the others wait for the 3-minute time limit
        # (submitit signals a job 90 s before its limit: 1 minute reads as timed out at once)
        last = [line for line in str(err).splitlines() if line.strip()][-3:]
        raise SideFailed(f"submitit job {job.job_id} failed: {' | '.join(last)[-300:]}") from err
    elapsed = time.perf_counter() - start
    if not all(results):
        raise SystemExit(f"submitit job {job.job_id} gave {results}")
    return elapsed


def settle(timeout: float = 60.0) -> None:
    """Wait until the lab runs no job and no node is still completing one. submitit returns
    once its result file exists, before its job has ended; without this, the job submitted
    next waited for the nodes that job still held (measured: 1-1.5 s more for noderun after
    a submitit job than after its own), queue time the docstring says counts for neither."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        jobs = subprocess.run(["squeue", "-h"], capture_output=True, text=True).stdout.strip()
        states = subprocess.run(
            ["sinfo", "-h", "-o", "%T"], capture_output=True, text=True
        ).stdout.split()
        if not jobs and states and all(state == "idle" for state in states):
            return
        time.sleep(0.1)
    raise SystemExit(f"the lab did not settle within {timeout:.0f} s (squeue, sinfo)")


def time_noderun(run_dir: Path, nodes: int, tasks: int) -> float:
    command = [
        PY, "-m", "noderun", "submit", "--mode", "srun", f"--nodes={nodes}",
        f"--nproc-per-node={tasks}", "--time=5", "--wait", f"--run-dir={run_dir}", str(WORKLOAD),
    ]  # fmt: skip
    start = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if result.returncode != 0:
        raise SystemExit(f"noderun submit failed ({result.returncode}): {result.stderr[-800:]}")
    return elapsed


def stages(run_dir: Path) -> str:
    from noderun import timeline

    record = json.loads((run_dir / "run.json").read_text())
    return "\n".join(f"  {line}" for line in timeline.table(record.get("timeline") or []))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    # 15 pairs: each job's start varies 0.07-0.8 s with SLURM, submitit's result by its 1-s poll
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--tasks-per-node", type=int, default=2)
    args = parser.parse_args()
    ours: list[float] = []
    theirs: list[float] = []
    with tempfile.TemporaryDirectory(prefix="noderun-bench-srun-", dir=".") as tmp:
        root = Path(tmp)
        compile_noderun()
        time_noderun(root / "warm-noderun", args.nodes, args.tasks_per_node)  # page cache
        time_submitit(root / "warm-submitit", args.nodes, args.tasks_per_node)
        shape = (args.nodes, args.tasks_per_node)
        for rep in range(args.reps):
            for side in ("noderun", "submitit") if rep % 2 == 0 else ("submitit", "noderun"):
                settle()
                if side == "noderun":
                    ours.append(time_noderun(root / f"n{rep}", *shape))
                    continue
                for attempt in range(1, 4):
                    try:
                        settle()
                        theirs.append(time_submitit(root / f"s{rep}-{attempt}", *shape))
                        break
                    except SideFailed as err:
                        print(f"rep {rep + 1}: {err}; measured again ({attempt}/3)")
                else:
                    raise SystemExit("submitit failed three times in a row")
            print(f"rep {rep + 1}: noderun {ours[-1]:.2f} s  submitit {theirs[-1]:.2f} s")
        print(f"noderun stages of its last job:\n{stages(root / f'n{args.reps - 1}')}")
    paired = [o / t for o, t in zip(ours, theirs, strict=True)]
    print(
        f"median: noderun {statistics.median(ours):.2f} s, submitit "
        f"{statistics.median(theirs):.2f} s ({args.nodes} nodes x {args.tasks_per_node} tasks, "
        f"{args.reps} pairs; per pair {min(paired):.2f}..{max(paired):.2f})"
    )
    print(f"ratio noderun/submitit = {statistics.median(paired):.2f} (target <= {TARGET:.2f})")


if __name__ == "__main__":
    main()
