"""A real collective test over all ranks: ``python -m noderun.doctor.collective``.

all_reduce latency and bus bandwidth per message size, with nccl-tests conventions
(algbw = size / time, busbw = algbw * 2(n-1)/n, time = the slowest rank's), then a
bandwidth test of the links between nodes (one rank per node, every node sending and
receiving at once in a few ring rounds) so that a slow link can be named. Its time does not
grow with the node count. Rank 0 prints one JSON line. Runs under srun, torchrun or noderun run.
"""

from __future__ import annotations

import json
import socket
import statistics
import sys
import time
from typing import Any

import torch
import torch.distributed as dist

from noderun.runtime.context import Context, init
from noderun.srun_lines import write_marked

MARKER = "NODERUN_DOCTOR_COLLECTIVE "
SIZES = (1 << 10, 1 << 16, 1 << 20, 1 << 24)  # bytes: 1 KiB .. 16 MiB
PAIR_BYTES = 1 << 22
PAIR_REPS = 3
MAX_SHIFTS = 2  # link rounds: all pairs up to 5 nodes, each node's ring links beyond
BUDGET_SEC = 0.05  # per message size: a health check, not a benchmark
MAX_ITERS = 20  # nccl-tests' default iteration count
SLOW_LINK = 0.5  # a pair below half the median pair bandwidth is named


def bus_factor(world: int) -> float:
    """nccl-tests' all_reduce factor: busbw = algbw * 2(n-1)/n."""
    return 2 * (world - 1) / world if world > 1 else 1.0


def time_all_reduce(ctx: Context, size: int) -> float:
    """Seconds per all_reduce of ``size`` bytes of float32, the slowest rank's mean.

    The iteration count fits ``BUDGET_SEC`` (agreed by all ranks from a timed probe), so the
    test takes about the same time on 2 nodes as on 200: only the per-op time grows. The
    budget is small enough that the ``MAX_ITERS`` cap binds only for ops under 2.5 ms (a cap
    that bound at slower ops made the test's time grow with the per-op time). When
    the probe alone fills the budget (large sizes on slow links), it is the measurement:
    one timed op after the warm-up, not a third op of the same size."""
    tensor = torch.ones(max(size // 4, 1), dtype=torch.float32, device=ctx.device)
    dist.all_reduce(tensor)  # warm-up: connections, buffers
    ctx.barrier()
    start = time.perf_counter()
    dist.all_reduce(tensor)
    if ctx.device.type == "cuda":
        torch.cuda.synchronize()
    probe = _slowest(ctx, time.perf_counter() - start)  # the same on every rank
    iters = max(1, min(MAX_ITERS, int(BUDGET_SEC / max(probe, 1e-6))))
    if iters == 1:
        return probe
    ctx.barrier()
    start = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(tensor)
    if ctx.device.type == "cuda":
        torch.cuda.synchronize()
    return _slowest(ctx, (time.perf_counter() - start) / iters)


def _slowest(ctx: Context, seconds: float) -> float:
    value = torch.tensor([seconds], dtype=torch.float64)
    if ctx.distributed:
        dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return float(value.item())


def ring_shifts(nodes: int) -> range:
    """Shifts s of the link rounds: in round s node i sends to node i+s (mod n), all at once.
    Shifts 1..n/2 cover every pair; at most ``MAX_SHIFTS`` rounds keep the time flat in n
    (every node's own links are still measured, so a slow node is always found)."""
    return range(1, min(nodes // 2, MAX_SHIFTS) + 1) if nodes > 1 else range(0)


def pair_bandwidths(ctx: Context) -> list[dict[str, Any]]:
    """Bytes/s of the links between nodes (their first ranks), measured in a few rounds in
    which every node sends to one peer and receives from another at the same time; one
    entry per pair of nodes, its slower direction."""
    node_of = ctx.gather_object(ctx.topology.node_rank)
    leaders: dict[int, int] = {}
    for rank, node in enumerate(node_of):
        leaders.setdefault(node, rank)
    ring = [leaders[node] for node in sorted(leaders)]
    names = ctx.gather_object(socket.gethostname())
    send = torch.ones(PAIR_BYTES // 4, dtype=torch.float32, device=ctx.device)
    receive = torch.empty_like(send)
    slowest: dict[tuple[int, int], float] = {}
    for shift in ring_shifts(len(ring)):
        seconds = 0.0
        ctx.barrier()
        if ctx.rank in ring:
            at = ring.index(ctx.rank)
            to, source = ring[(at + shift) % len(ring)], ring[(at - shift) % len(ring)]
            start = time.perf_counter()
            for _ in range(PAIR_REPS):
                requests = [dist.isend(send, to), dist.irecv(receive, source)]
                for request in requests:
                    if request is not None:  # None only for ranks outside the group
                        request.wait()
            seconds = (time.perf_counter() - start) / PAIR_REPS
        times = ctx.gather_object(seconds)  # the receiver's time of each link source -> rank
        for at, rank in enumerate(ring):
            source = ring[(at - shift) % len(ring)]
            pair = (min(source, rank), max(source, rank))
            slowest[pair] = max(slowest.get(pair, 0.0), times[rank])
    return [
        {"nodes": [names[a], names[b]], "bandwidth_bytes_per_sec": PAIR_BYTES / seconds}
        for (a, b), seconds in sorted(slowest.items())
    ]


def run(ctx: Context) -> dict[str, Any]:
    factor = bus_factor(ctx.world_size)
    began = time.monotonic()
    sizes = []
    for size in SIZES:
        seconds = time_all_reduce(ctx, size)
        algbw = size / seconds
        sizes.append(
            {
                "size_bytes": size,
                "time_us": seconds * 1e6,
                "algbw_gbps": algbw / 1e9,
                "busbw_gbps": algbw * factor / 1e9,
            }
        )
    reduced = time.monotonic()
    pairs = pair_bandwidths(ctx)
    phases = {
        "all_reduce": round(reduced - began, 3),
        "links": round(time.monotonic() - reduced, 3),
    }
    slow = None
    if len(pairs) >= 2:
        median = statistics.median(p["bandwidth_bytes_per_sec"] for p in pairs)
        worst = min(pairs, key=lambda p: p["bandwidth_bytes_per_sec"])
        if worst["bandwidth_bytes_per_sec"] < SLOW_LINK * median:
            slow = {**worst, "median_bytes_per_sec": median}
    return {
        "world_size": ctx.world_size,
        "backend": ctx.backend,
        "all_reduce": sizes,
        "pairs": pairs,
        "slowest_pair": slow,
        "seconds": phases,
    }


def main() -> int:
    torch.set_num_threads(1)
    started = time.monotonic()
    with init() as ctx:
        joined = time.monotonic() - started
        result = run(ctx)
        result["seconds"]["init"] = round(joined, 3)
        if ctx.is_main:
            write_marked(MARKER, json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
