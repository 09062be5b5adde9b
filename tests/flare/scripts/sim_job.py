"""A two-site FedAvg job in FLARE's simulator, sites given on the command line (tests).

sim_job.py WORKSPACE SITE1_SCRIPT SITE1_NODES SITE2_SCRIPT [ROUNDS [cse]]
("cse": FLARE's cross-site evaluation after training: submit_model and validate tasks)
"""

import contextlib
import ctypes
import os
import sys
import time

import psutil
import torch

from noderun.flare import FedAvgJob, Site
from noderun.runtime.entry import run_main


def adopt_orphans() -> None:
    """Linux: this process adopts its descendants whose parent dies before them (FLARE's
    simulator processes, ended by noderun's watchdog on a failed site, leave their children),
    so that ``reap`` waits for them, the test's CPU counts theirs, and one still running when
    the simulation returned is seen even if its command line names no workspace."""
    PR_SET_CHILD_SUBREAPER = 36
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def reap(timeout: float = 30.0) -> None:
    """Wait for every descendant (adopted or not); kill what is still there after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid:
            continue
        if time.monotonic() > deadline:
            for proc in psutil.Process().children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    proc.kill()
            deadline = float("inf")
        time.sleep(0.05)


def main() -> None:
    adopt_orphans()
    try:
        simulate()
    finally:  # what still runs now outlived the simulation: the test fails on these lines
        for proc in psutil.Process().children(recursive=True):
            with contextlib.suppress(psutil.Error):
                if proc.status() != psutil.STATUS_ZOMBIE:
                    print(f"OUTLIVED {' '.join(proc.cmdline())}", file=sys.stderr, flush=True)
        reap()


def simulate() -> None:
    workspace, script1, nodes1, script2, *rest = sys.argv[1:]
    job = FedAvgJob(
        "sim",
        model=torch.nn.Linear(4, 2),
        script=script1,
        num_rounds=int(rest[0]) if rest else 2,
        sites=[Site("site-1", nnodes=int(nodes1)), Site("site-2", script=script2)],
    )
    if rest[1:] == ["cse"]:
        from nvflare.recipe.utils import add_cross_site_evaluation

        add_cross_site_evaluation(job.recipe)
    print(job.table(), flush=True)
    print(f"RESULT {job.simulate(workspace)}", flush=True)


if __name__ == "__main__":
    sys.exit(run_main(main))
