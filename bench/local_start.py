"""CPU seconds of `noderun run --nnodes N --nproc-per-node 1` of a no-op script: torchrun agents
forked from one node template (the default) against agents exec'd one by one
(``NODERUN_NODE_TEMPLATE=0``), for 2 and 4 simulated nodes.

Each repetition runs both, back to back (order alternating), in the same run; the CPU time is
user + system of the whole process tree (``getrusage(RUSAGE_CHILDREN)``: noderun, the template,
the agents, the ranks). The headline is the median of the per-repetition ratios for 2 nodes.

    .venv/bin/python bench/local_start.py [--reps 5] [--nodes 2 4]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

TARGET = 0.70
NOP = "print('ok')\n"


def cpu_of(nnodes: int, template: bool, workdir: Path, run: int) -> float:
    env = {**os.environ, "NODERUN_NODE_TEMPLATE": "1" if template else "0"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "noderun",
            "run",
            "--nnodes",
            str(nnodes),
            "--nproc-per-node",
            "1",
            "--run-dir",
            str(workdir / f"run{run}"),
            str(workdir / "nop.py"),
        ],
        check=True,
        env=env,
        stdout=subprocess.DEVNULL,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--nodes", type=int, nargs="+", default=[2, 4])
    opts = parser.parse_args()
    ratios: dict[int, list[float]] = {n: [] for n in opts.nodes}
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        (workdir / "nop.py").write_text(NOP)
        run = 0
        for rep in range(opts.reps):
            for nnodes in opts.nodes:
                cpu = {}
                for template in (True, False) if rep % 2 == 0 else (False, True):
                    run += 1
                    cpu[template] = cpu_of(nnodes, template, workdir, run)
                ratios[nnodes].append(cpu[True] / cpu[False])
                print(
                    f"rep {rep} nodes {nnodes}: template {cpu[True]:.2f} CPU-s, "
                    f"exec {cpu[False]:.2f} CPU-s, ratio {cpu[True] / cpu[False]:.2f}",
                    flush=True,
                )
    for nnodes in opts.nodes:
        print(f"nodes {nnodes}: median ratio template/exec {statistics.median(ratios[nnodes]):.2f}")
    headline = statistics.median(ratios[opts.nodes[0]])
    print(f"ratio template/exec = {headline:.2f} (target <= {TARGET:.2f})")
    if headline > TARGET:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
