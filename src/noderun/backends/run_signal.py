"""Signal the processes of one run on this machine, found by their ``NODERUN__RUN_DIR``.

`noderun cancel` uses it here and, over SSH, on each host of the run:
``python -m noderun.backends.run_signal RUN_DIR graceful|kill [--node N]…`` prints one JSON
line (``--node``: only the processes of those nodes, where a process says its node).
``graceful`` sends SIGUSR1 to each rank that handles it (noderun's preemption: the ranks
agree on a step, checkpoint and exit 75) and names those that do not (a plain script dies of
SIGUSR1: it is left alone); ``kill`` SIGKILLs every process of the run (agents, ranks, their
children) and says how many there were.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
from collections.abc import Collection, Sequence
from pathlib import Path

import psutil

from noderun.stacks.capture import find_ranks
from noderun.topology.contract import RankContract

GRACEFUL = signal.SIGUSR1


def handles(pid: int, signum: int) -> bool:
    """The process has a handler of its own for ``signum`` (``SigCgt`` in /proc/PID/status)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    except (OSError, ValueError, IndexError):
        pass
    return False


def _contract(pid: int) -> RankContract | None:
    try:
        return RankContract.from_env(psutil.Process(pid).environ())
    except (psutil.Error, OSError):
        return None


def _on(contract: RankContract | None, nodes: Collection[int] | None) -> bool:
    """The process is of one of ``nodes`` (or says no node, or every node is wanted)."""
    return not nodes or contract is None or contract.node_rank in (None, *nodes)


def run_processes(run_dir: Path, nodes: Collection[int] | None = None) -> list[psutil.Process]:
    """Every live process of this machine that belongs to the run in ``run_dir``."""
    want = os.path.realpath(run_dir)
    mine = []
    for proc in psutil.process_iter():
        try:
            if proc.status() == psutil.STATUS_ZOMBIE or proc.pid == os.getpid():
                continue
            contract = RankContract.from_env(proc.environ())
        except (psutil.Error, OSError):
            continue
        found = contract.run_dir
        if found and os.path.realpath(found) == want and _on(contract, nodes):
            mine.append(proc)
    return mine


def graceful(run_dir: Path, nodes: Collection[int] | None = None) -> dict[str, list[int]]:
    """SIGUSR1 to the ranks that handle it; the ranks found ("ranks") and those signalled."""
    ranks = [r for r in find_ranks(run_dir=run_dir) if _on(_contract(r.pid), nodes)]
    signalled = []
    for rank in ranks:
        if handles(rank.pid, GRACEFUL):
            with contextlib.suppress(ProcessLookupError):
                os.kill(rank.pid, GRACEFUL)
                signalled.append(rank.rank)
    return {"ranks": [r.rank for r in ranks], "signalled": signalled}


def kill(run_dir: Path, nodes: Collection[int] | None = None) -> int:
    """SIGKILL every process of the run here; how many there were."""
    victims = run_processes(run_dir, nodes)
    for proc in victims:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(victims, timeout=5)
    return len(victims)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m noderun.backends.run_signal")
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("action", choices=("graceful", "kill"))
    parser.add_argument("--node", type=int, action="append", help="only this node's (repeatable)")
    opts = parser.parse_args(argv)
    if opts.action == "graceful":
        answer: dict[str, object] = dict(graceful(opts.run_dir, opts.node))
    else:
        answer = {"killed": kill(opts.run_dir, opts.node)}
    print(json.dumps(answer), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
