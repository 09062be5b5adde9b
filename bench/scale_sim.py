"""Toward large clusters, measured on paper: does anything grow worse than linearly with nodes?

    .venv/bin/python bench/scale_sim.py [--max-nodes 10000] [--gate 256,512,1024,2048]
                                        [--logs 100,300,1000,2000]

Times, best of a few repetitions each (best-of filters out the other load of a shared machine):
- planning + rendering at 1, 10, 100, 1,000 and 10,000 nodes x 8 ranks: hostlist expansion,
  the SLURM step plan (srun argv, rank -> node for every rank, the node -> ranks table), the
  sbatch script, and the local launch plan;
- the per-node check-in gate with 256-2,048 simulated nodes checking in over loopback (the
  master in its own process, the nodes as sockets of one selector loop);
- `noderun explain` over 100-2,000 rank logs of a failed run.
For each, the growth exponent k in time ~ n^k (least squares on the log-log points from n >= 100
for planning, all points otherwise). Headline: the worst exponent (target <= 1.1).
"""

from __future__ import annotations

import argparse
import math
import resource
import selectors
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from noderun.backends.ports import free_port
from noderun.explain import explain
from noderun.plan import Gang, plan_local
from noderun.plan.sbatch import SubmitRequest
from noderun.plan.slurm import LaunchMode, StepPlan
from noderun.topology.hostlist import expand_hostlist, tasks_per_node

RANKS_PER_NODE = 8
TARGET = 1.1


def best_of(fn: Callable[[], object], reps: int) -> float:
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def exponent(sizes: Sequence[int], times: Sequence[float]) -> float:
    """Least-squares slope of log(time) against log(size)."""
    xs = [math.log(s) for s in sizes]
    ys = [math.log(max(t, 1e-9)) for t in times]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mx) ** 2 for x in xs
    )


def plan_and_render(nodes: int, run_dir: Path) -> None:
    nodelist = f"node[{1:05d}-{nodes:05d}]" if nodes > 1 else "node00001"
    hosts = tuple(expand_hostlist(nodelist))
    assert len(hosts) == nodes and len(tasks_per_node(f"{RANKS_PER_NODE}(x{nodes})")) == nodes
    step = StepPlan(
        mode=LaunchMode.TORCHRUN,
        nnodes=nodes,
        nproc_per_node=RANKS_PER_NODE,
        run_dir=run_dir,
        script="/shared/train.py",
        hosts=hosts,
    )
    step.srun_argv()
    owners = [step.node_of_rank(rank) for rank in range(step.world_size)]
    assert owners[-1] == nodes - 1
    step.rank_table()
    request = SubmitRequest(
        script="/shared/train.py",
        run_dir=run_dir,
        workdir=run_dir.parent,
        nodes=nodes,
        nproc_per_node=RANKS_PER_NODE,
    )
    assert str(request.materialize()).startswith("#!/bin/bash")
    plan_local(
        Gang(
            nnodes=nodes,
            nproc_per_node=RANKS_PER_NODE,
            master_addr="127.0.0.1",
            master_port=29500,
            run_dir=run_dir,
            script="/shared/train.py",
            run_id="bench",
        )
    )


def gate(total: int) -> float:
    """Seconds from the master listening until ``total`` simulated nodes have all checked in and
    been told GO. The master (node 0) runs the real ``NodeGate`` in its own process, as on a
    cluster; the other nodes are non-blocking sockets driven by one selector loop here (real
    connections over loopback, the gate's own protocol). One Python thread per simulated node,
    as this benchmark had before, measured the GIL instead: 1,024 threads handing the GIL to
    the master one by one grew as n^1.6 while the gate itself grows linearly."""
    port = free_port()
    master = subprocess.Popen(
        [sys.executable, "-c", _MASTER.format(total=total, port=port)],
        stdin=subprocess.DEVNULL,
    )
    while True:  # a connection that says nothing is ignored by the gate
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.001)
    start = time.perf_counter()
    _members(total, port)
    elapsed = time.perf_counter() - start
    if master.wait(timeout=60) != 0:
        raise SystemExit(f"gate with {total} nodes failed: the master exited {master.returncode}")
    return elapsed


_MASTER = (
    "from noderun.backends.node_gate import NodeGate; NodeGate(index=0, total={total}, "
    "addr='127.0.0.1', port={port}, host='sim0', join_timeout=60, describe=str).wait()"
)


def _members(total: int, port: int) -> None:
    """Nodes 1..total-1: connect, send HELLO, wait for GO, close; all at once in one loop."""
    selector = selectors.DefaultSelector()
    for index in range(1, total):
        member = socket.socket()
        member.setblocking(False)
        member.connect_ex(("127.0.0.1", port))
        selector.register(member, selectors.EVENT_WRITE, index)
    waiting, received = total - 1, dict.fromkeys(range(1, total), b"")
    while waiting:
        ready = selector.select(timeout=60)
        if not ready:
            raise SystemExit(f"gate with {total} nodes: no answer for 60 s")
        for key, events in ready:
            member, index = key.fileobj, key.data
            assert isinstance(member, socket.socket)
            if events & selectors.EVENT_WRITE:
                member.send(f"HELLO {index} sim{index}\n".encode())
                selector.modify(member, selectors.EVENT_READ, index)
                continue
            chunk = member.recv(64)
            received[index] += chunk
            if chunk and not received[index].endswith(b"\n"):
                continue
            if received[index].strip() != b"GO":
                raise SystemExit(f"gate with {total} nodes: node {index} got {received[index]!r}")
            selector.unregister(member)
            member.close()
            waiting -= 1


def rank_logs(directory: Path, ranks: int) -> None:
    """``ranks`` rank logs of a run in which rank 7 died: 200 healthy lines each."""
    (directory / "logs").mkdir(parents=True)
    healthy = "".join(f"epoch {e} step {s} loss 0.{s:04d}\n" for e in range(4) for s in range(50))
    for rank in range(ranks):
        text = healthy
        if rank == 7:
            text += "Traceback (most recent call last):\nRuntimeError: CUDA out of memory.\n"
        elif rank > 7:
            text += "RuntimeError: Connection closed by peer [127.0.0.1]:29500\n"
        (directory / "logs" / f"rank{rank}.log").write_text(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-nodes", type=int, default=10_000)
    parser.add_argument("--gate", default="256,512,1024,2048")
    parser.add_argument("--logs", default="100,300,1000,2000")
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)  # one socket per simulated node
    wanted = max(int(x) for x in args.gate.split(",")) + 256
    if soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(wanted, hard), hard))
    sizes = [n for n in (1, 10, 100, 300, 1_000, 3_000, 10_000) if n <= args.max_nodes]
    exponents: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        print(f"planning + rendering, {RANKS_PER_NODE} ranks per node:")
        plan_times = []
        for nodes in sizes:
            plan_times.append(best_of(lambda n=nodes: plan_and_render(n, tmp / "run"), 5))
            per_node = plan_times[-1] / nodes * 1e6
            print(
                f"  {nodes:>6} nodes ({nodes * RANKS_PER_NODE:>6} ranks): "
                f"{plan_times[-1]:.4f} s ({per_node:.1f} us per node)"
            )
        big = [(s, t) for s, t in zip(sizes, plan_times, strict=True) if s >= 100]
        exponents["planning"] = exponent([s for s, _ in big], [t for _, t in big])

        gate_sizes = [int(x) for x in args.gate.split(",")]
        gate_times = []
        print("check-in gate over loopback:")
        for total in gate_sizes:
            gate_times.append(min(gate(total) for _ in range(3)))
            print(f"  {total:>6} nodes: {gate_times[-1]:.3f} s")
        exponents["gate"] = exponent(gate_sizes, gate_times)

        log_sizes = [int(x) for x in args.logs.split(",")]
        log_times = []
        print("explain over rank logs (200 lines each, rank 7 out of memory):")
        for ranks in log_sizes:
            run = tmp / f"logs{ranks}"
            rank_logs(run, ranks)
            cause = explain([str(run)])[0].cause
            log_times.append(best_of(lambda r=run: explain([str(r)]), 3))
            print(f"  {ranks:>6} rank logs: {log_times[-1]:.3f} s (root cause {cause})")
        exponents["explain"] = exponent(log_sizes, log_times)

    for name, k in exponents.items():
        print(f"growth exponent {name}: {k:.2f}")
    worst = max(exponents, key=lambda name: exponents[name])
    print(
        f"at {sizes[-1]:,} nodes x {RANKS_PER_NODE} ranks: planning + rendering "
        f"{plan_times[-1]:.3f} s; gate at {gate_sizes[-1]} nodes {gate_times[-1]:.2f} s; "
        f"explain over {log_sizes[-1]} logs {log_times[-1]:.2f} s"
    )
    print(f"growth exponent (worst: {worst}) = {exponents[worst]:.2f} (target <= {TARGET})")


if __name__ == "__main__":
    main()
