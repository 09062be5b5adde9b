"""Wall time of `noderun doctor` on 2 and 3 lab nodes: it must not grow with the node count.

Each repetition allocates the nodes with salloc and runs `noderun doctor` inside (one probe
per node in one srun step, then the collective test); the time is the doctor's own, recorded
in its result, so queueing for the allocation does not count. Alternates 2 and 3 nodes.

Baseline, same run: an srun step that only starts Python and imports torch.distributed on
every node (timed inside the allocation too). On a real cluster each node has its own cores;
on the lab all nodes share this machine's 2, so every CPU-bound part on 3 "nodes" costs about
1.5x its time on 2, the baseline as much as the doctor's own probes and collective (the probe
step alone, stdlib and psutil, one per node in parallel, shows the same factor). The headline
divides the doctor's 3-vs-2 ratio by the baseline's, both from the same repetition: what is
left is the doctor's own growth with the node count (serial probes, pairwise link tests),
the lab's shared cores cancelled. The raw ratio, and the ratio of the times above the
baseline (this benchmark's headline until 2026-11-25: a difference of noisy figures that
keeps the contention factor), are printed beside it.

    .venv/bin/python bench/doctor.py [--reps 3]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bytecode import compile_noderun

TARGET = 1.25  # 3 nodes may take at most 25 % longer than 2 (the probes run in parallel)


def doctor_seconds(nodes: int, workdir: Path, rep: int) -> tuple[float, float]:
    result = workdir / f"doctor-{nodes}-{rep}.json"
    done = subprocess.run(
        [
            "salloc", f"--nodes={nodes}", "--time=00:10:00", sys.executable, "-m", "noderun",
            "doctor", "--run-dir", str(workdir / f"run-{nodes}-{rep}"), "--result-file",
            str(result),
        ],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    if not result.is_file():
        raise SystemExit(f"doctor on {nodes} nodes left no result: {done.stderr[-500:]}")
    report = json.loads(result.read_text())
    return float(report["duration_sec"]), float(report["step_seconds"]["probe"])


BASELINE = """
import subprocess, sys, time
start = time.monotonic()
subprocess.run(["srun", "--ntasks-per-node=1", sys.executable, "-c", "import torch.distributed"],
               check=True)
print(f"BASELINE {time.monotonic() - start:.3f}")
"""


def baseline_seconds(nodes: int) -> float:
    """Seconds of an srun step that starts Python + torch on every node, inside salloc."""
    done = subprocess.run(
        ["salloc", f"--nodes={nodes}", "--time=00:10:00", sys.executable, "-c", BASELINE],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    for line in done.stdout.splitlines():
        if line.startswith("BASELINE "):
            return float(line.split()[1])
    raise SystemExit(f"baseline on {nodes} nodes failed: {done.stderr[-500:]}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    if shutil.which("salloc") is None:
        raise SystemExit("salloc not found: start the lab with ../shared/slurm-lab/up.sh -n 3 -a")
    compile_noderun()
    times: dict[int, list[float]] = {2: [], 3: []}
    probes: dict[int, list[float]] = {2: [], 3: []}
    bases: dict[int, list[float]] = {2: [], 3: []}
    with tempfile.TemporaryDirectory(prefix="noderun-bench-doctor-") as tmp:
        for rep in range(1, args.reps + 1):
            for nodes in (2, 3) if rep % 2 else (3, 2):
                seconds, probe = doctor_seconds(nodes, Path(tmp).resolve(), rep)
                base = baseline_seconds(nodes)
                times[nodes].append(seconds)
                probes[nodes].append(probe)
                bases[nodes].append(base)
                print(
                    f"rep {rep}: {nodes} nodes {seconds:.2f} s (probe step {probe:.2f} s); "
                    f"baseline (start torch on every node) {base:.2f} s"
                )
    two, three = statistics.median(times[2]), statistics.median(times[3])
    p2, p3 = statistics.median(probes[2]), statistics.median(probes[3])
    b2, b3 = statistics.median(bases[2]), statistics.median(bases[3])
    own2 = statistics.median(t - b for t, b in zip(times[2], bases[2], strict=True))
    own3 = statistics.median(t - b for t, b in zip(times[3], bases[3], strict=True))
    relative = statistics.median(
        (d3 / d2) / (c3 / c2)
        for d2, d3, c2, c3 in zip(times[2], times[3], bases[2], bases[3], strict=True)
    )
    print(
        f"median probe step (one probe per node, in parallel): 2 nodes {p2:.2f} s, "
        f"3 nodes {p3:.2f} s, ratio {p3 / p2:.2f}"
    )
    print(f"median doctor: 2 nodes {two:.2f} s, 3 nodes {three:.2f} s, raw ratio {three / two:.2f}")
    print(
        f"median baseline (start torch on every node): 2 nodes {b2:.2f} s, 3 nodes {b3:.2f} s, "
        f"ratio {b3 / b2:.2f} (the lab's shared cores)"
    )
    print(
        f"doctor above the baseline: 2 nodes {own2:.2f} s, 3 nodes {own3:.2f} s, "
        f"ratio {own3 / own2:.2f}"
    )
    print(
        f"ratio doctor 3 nodes/2 nodes = {relative:.2f} relative to starting torch on every "
        f"node (target <= {TARGET})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
