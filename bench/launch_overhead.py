"""Wall time of `noderun run --nnodes 2 --nproc-per-node 2` against two plain torchrun commands.

Both launch bench/allreduce_once.py (init + one all_reduce) on 2 simulated nodes x 2 processes,
back to back in each repetition (order alternating), in the same run. Prints every repetition
and the medians; the headline is the median of the per-repetition ratios, which cancels slow
drifts of a shared machine better than a ratio of medians.

    .venv/bin/python bench/launch_overhead.py [--reps 9]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bytecode import compile_noderun

from noderun.backends.ports import free_port

WORKLOAD = str(Path(__file__).with_name("allreduce_once.py"))
TARGET = 1.03


def time_noderun(run_dir: Path) -> float:
    start = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "noderun",
            "run",
            "--nnodes",
            "2",
            "--nproc-per-node",
            "2",
            "--run-dir",
            str(run_dir),
            WORKLOAD,
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return time.perf_counter() - start


def time_torchrun() -> float:
    port = free_port()
    start = time.perf_counter()
    agents = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--nnodes=2",
                "--nproc-per-node=2",
                f"--node-rank={node}",
                "--master-addr=127.0.0.1",
                f"--master-port={port}",
                WORKLOAD,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for node in range(2)
    ]
    codes = [agent.wait() for agent in agents]
    elapsed = time.perf_counter() - start
    if any(codes):
        raise SystemExit(f"torchrun baseline failed: exit codes {codes}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=9)
    args = parser.parse_args()
    ours, base = [], []
    with tempfile.TemporaryDirectory() as tmp:
        compile_noderun()
        time_torchrun()  # warm the page cache for both
        for rep in range(args.reps):
            if rep % 2:
                ours.append(time_noderun(Path(tmp) / f"run{rep}"))
                base.append(time_torchrun())
            else:
                base.append(time_torchrun())
                ours.append(time_noderun(Path(tmp) / f"run{rep}"))
            print(f"rep {rep + 1}: torchrun {base[-1]:.2f} s  noderun {ours[-1]:.2f} s", flush=True)
    med_ours, med_base = statistics.median(ours), statistics.median(base)
    paired = statistics.median(o / b for o, b in zip(ours, base, strict=True))
    print(f"median torchrun x2 = {med_base:.2f} s, median noderun run = {med_ours:.2f} s")
    print(f"ratio of medians = {med_ours / med_base:.2f}")
    print(
        f"ratio noderun/torchrun = {paired:.2f} (median of paired ratios; target <= {TARGET:.2f})"
    )


if __name__ == "__main__":
    main()
