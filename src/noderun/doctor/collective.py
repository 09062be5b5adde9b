"""A real collective test over all ranks: ``python -m noderun.doctor.collective``.

all_reduce latency and bus bandwidth per message size, with nccl-tests conventions
(algbw = size / time, busbw = algbw * 2(n-1)/n, time = the slowest rank's), then a
send/recv bandwidth test between every pair of nodes (one rank per node) so that a slow
link can be named. Rank 0 prints one JSON line. Runs under srun, torchrun or noderun run.
"""

from __future__ import annotations

import itertools
import json
import socket
import statistics
import sys
import time
from typing import Any

import torch
import torch.distributed as dist

from noderun.doctor.probe import write_marked
from noderun.runtime.context import Context, init

MARKER = "NODERUN_DOCTOR_COLLECTIVE "
SIZES = (1 << 10, 1 << 16, 1 << 20, 1 << 24)  # bytes: 1 KiB .. 16 MiB
PAIR_BYTES = 1 << 22
SLOW_LINK = 0.5  # a pair below half the median pair bandwidth is named


def bus_factor(world: int) -> float:
    """nccl-tests' all_reduce factor: busbw = algbw * 2(n-1)/n."""
    return 2 * (world - 1) / world if world > 1 else 1.0


def time_all_reduce(ctx: Context, size: int) -> float:
    """Seconds per all_reduce of ``size`` bytes of float32, the slowest rank's mean."""
    tensor = torch.ones(max(size // 4, 1), dtype=torch.float32, device=ctx.device)
    iters = 20 if size <= 1 << 16 else 5
    for _ in range(2):
        dist.all_reduce(tensor)
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


def pair_bandwidths(ctx: Context) -> list[dict[str, Any]]:
    """Bytes/s of a send/recv round trip between the first ranks of every pair of nodes."""
    hosts = ctx.gather_object(ctx.topology.node_rank)
    leaders: dict[int, int] = {}
    for rank, node in enumerate(hosts):
        leaders.setdefault(node, rank)
    names = ctx.gather_object(socket.gethostname())
    buffer = torch.ones(PAIR_BYTES // 4, dtype=torch.float32, device=ctx.device)
    results = []
    for a, b in itertools.combinations(sorted(leaders), 2):
        ra, rb = leaders[a], leaders[b]
        seconds = 0.0
        if ctx.rank in (ra, rb):
            peer = rb if ctx.rank == ra else ra
            start = time.perf_counter()
            for _ in range(3):
                if ctx.rank == ra:
                    dist.send(buffer, peer)
                    dist.recv(buffer, peer)
                else:
                    dist.recv(buffer, peer)
                    dist.send(buffer, peer)
            seconds = (time.perf_counter() - start) / 3
        seconds = _slowest(ctx, seconds)
        results.append(
            {"nodes": [names[ra], names[rb]], "bandwidth_bytes_per_sec": 2 * PAIR_BYTES / seconds}
        )
    return results


def run(ctx: Context) -> dict[str, Any]:
    factor = bus_factor(ctx.world_size)
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
    pairs = pair_bandwidths(ctx)
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
    }


def main() -> int:
    torch.set_num_threads(1)
    with init() as ctx:
        result = run(ctx)
        if ctx.is_main:
            write_marked(MARKER, json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
