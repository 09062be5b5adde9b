"""Toward large clusters, measured on paper: does anything grow worse than linearly with nodes?

    .venv/bin/python bench/scale_sim.py [--max-nodes 10000] [--gate 128,256,512,1024]
                                        [--logs 100,300,1000,2000]

Times, best of a few repetitions each (best-of filters out the other load of a shared machine):
- planning + rendering at 1, 10, 100, 1,000 and 10,000 nodes x 8 ranks: hostlist expansion,
  the SLURM step plan (srun argv, rank -> node for every rank, the node -> ranks table), the
  sbatch script, and the local launch plan;
- the per-node check-in gate with 128-1,024 simulated nodes checking in over loopback (threads);
- `noderun explain` over 100-2,000 rank logs of a failed run.
For each, the growth exponent k in time ~ n^k (least squares on the log-log points from n >= 100
for planning, all points otherwise). Headline: the worst exponent (target <= 1.1).
"""

from __future__ import annotations

import argparse
import math
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from noderun.backends.ports import free_port
from noderun.explain import explain
from noderun.node_gate import NodeGate
from noderun.plan import plan_local
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
        nnodes=nodes,
        nproc_per_node=RANKS_PER_NODE,
        master_port=29500,
        run_dir=run_dir,
        script="/shared/train.py",
        script_args=(),
        run_id="bench",
    )


def gate(total: int) -> float:
    """Seconds from the master listening until ``total`` simulated nodes (threads) have all
    checked in and been released (thread start-up of the master not counted)."""
    port = free_port()
    errors: list[BaseException] = []

    def member(index: int) -> None:
        try:
            NodeGate(
                index=index, total=total, addr="127.0.0.1", port=port, host=f"sim{index}",
                join_timeout=60, describe=lambda i: f"node {i}",
            ).wait()  # fmt: skip
        except BaseException as err:
            errors.append(err)

    threads = [threading.Thread(target=member, args=(i,)) for i in range(total)]
    threads[0].start()
    while True:  # a connection that says nothing is ignored by the gate
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.001)
    start = time.perf_counter()
    for thread in threads[1:]:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise SystemExit(f"gate with {total} nodes failed: {errors[0]}")
    return time.perf_counter() - start


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
    parser.add_argument("--gate", default="128,256,512,1024")
    parser.add_argument("--logs", default="100,300,1000,2000")
    args = parser.parse_args()
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
