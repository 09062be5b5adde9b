"""`noderun run --hosts` 2 x 2 against the same job started by hand with one
`ssh HOST torchrun …` per host, on the SSH lab (real sshd hosts on loopback, tests/ssh/lab.py).

Both run bench/allreduce_once.py (init + one all_reduce), alternating, paired. noderun adds
its checks of every host (one ssh round trip each, in parallel), the guard on each host and
the run directory; the hand-made side is what seed 001 did. Needs root and openssh-server
(`make ssh-lab`).

    .venv/bin/python bench/ssh_launch.py [--reps 7]
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
from tests.ssh.lab import SshLab, available  # noqa: E402

from noderun.backends.ports import free_port  # noqa: E402

WORKLOAD = HERE / "allreduce_once.py"
PY = sys.executable
TARGET = 1.10
HOSTS = ("sshhost1", "sshhost2")


def time_noderun(lab: SshLab, run_dir: Path) -> float:
    start = time.perf_counter()
    done = subprocess.run(
        [PY, "-m", "noderun", "run", "--hosts", ",".join(HOSTS), "--ssh-config", str(lab.config),
         "--nproc-per-node", "2", "--run-dir", str(run_dir), str(WORKLOAD)],
        cwd=ROOT, capture_output=True, text=True,
    )  # fmt: skip
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"noderun failed: {done.stderr[-800:]}")
    return elapsed


def time_by_hand(lab: SshLab) -> float:
    port = free_port()
    start = time.perf_counter()
    procs = []
    for node, host in enumerate(HOSTS):
        torchrun = shlex.join(
            [PY, "-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node=2",
             f"--node-rank={node}", f"--master-addr={HOSTS[0]}", f"--master-port={port}",
             str(WORKLOAD)]
        )  # fmt: skip
        procs.append(
            subprocess.Popen(
                [
                    "ssh",
                    "-F",
                    str(lab.config),
                    "-o",
                    "BatchMode=yes",
                    host,
                    f"cd {shlex.quote(str(ROOT))} && {torchrun}",
                ],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
        )
    codes = [p.wait() for p in procs]
    elapsed = time.perf_counter() - start
    if any(codes):
        raise SystemExit(f"hand-started torchrun failed: {procs[0].stdout.read()[-800:]!r}")  # type: ignore[union-attr]
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--reps", type=int, default=7)
    args = parser.parse_args()
    why = available()
    if why:
        raise SystemExit(f"no SSH lab here: {why}")
    lab = SshLab(hosts=2).start()
    ours: list[float] = []
    theirs: list[float] = []
    try:
        with tempfile.TemporaryDirectory(prefix="noderun-bench-ssh-", dir=ROOT) as tmp:
            time_noderun(lab, Path(tmp) / "warm")
            time_by_hand(lab)
            for rep in range(args.reps):
                for side in ("noderun", "hand") if rep % 2 == 0 else ("hand", "noderun"):
                    if side == "noderun":
                        ours.append(time_noderun(lab, Path(tmp) / f"r{rep}"))
                    else:
                        theirs.append(time_by_hand(lab))
                print(f"rep {rep + 1}: noderun {ours[-1]:.2f} s  ssh+torchrun {theirs[-1]:.2f} s")
    finally:
        lab.stop()
    paired = [o / t for o, t in zip(ours, theirs, strict=True)]
    print(
        f"median: noderun {statistics.median(ours):.2f} s, ssh+torchrun "
        f"{statistics.median(theirs):.2f} s (2 hosts x 2, per pair {min(paired):.2f}.."
        f"{max(paired):.2f})"
    )
    print(f"ratio noderun/ssh-torchrun = {statistics.median(paired):.2f} (target <= {TARGET:.2f})")


if __name__ == "__main__":
    main()
