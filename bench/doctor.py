"""Wall time of `noderun doctor` on 2 and 3 lab nodes: it must not grow with the node count.

Each repetition allocates the nodes with salloc and runs `noderun doctor` inside (one probe
per node in one srun step, then the collective test); the time is the doctor's own, recorded
in its result, so queueing for the allocation does not count. Alternates 2 and 3 nodes.

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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    if shutil.which("salloc") is None:
        raise SystemExit("salloc not found: start the lab with ../shared/slurm-lab/up.sh -n 3 -a")
    times: dict[int, list[float]] = {2: [], 3: []}
    probes: dict[int, list[float]] = {2: [], 3: []}
    with tempfile.TemporaryDirectory(prefix="noderun-bench-doctor-") as tmp:
        for rep in range(1, args.reps + 1):
            for nodes in (2, 3):
                seconds, probe = doctor_seconds(nodes, Path(tmp).resolve(), rep)
                times[nodes].append(seconds)
                probes[nodes].append(probe)
                print(f"rep {rep}: {nodes} nodes {seconds:.2f} s (probe step {probe:.2f} s)")
    two, three = statistics.median(times[2]), statistics.median(times[3])
    p2, p3 = statistics.median(probes[2]), statistics.median(probes[3])
    print(
        f"median probe step (one probe per node, in parallel): 2 nodes {p2:.2f} s, "
        f"3 nodes {p3:.2f} s, ratio {p3 / p2:.2f}"
    )
    print(
        f"median doctor: 2 nodes {two:.2f} s, 3 nodes {three:.2f} s (the collective test "
        "runs one rank per node: on the lab all nodes share this machine's cores)"
    )
    print(f"ratio doctor 3 nodes/2 nodes = {three / two:.2f} (target <= {TARGET})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
