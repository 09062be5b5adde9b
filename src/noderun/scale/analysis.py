"""Scaling arithmetic, pure: sweep points, speedup and efficiency, the markdown table.

Strong scaling keeps the global work fixed, weak scaling the work per rank. Both are judged
by throughput (samples per second of the whole job, from metrics.csv) when the script reports
it, else by wall time: strong speedup = T_base / T, weak speedup = (T_base / T) x (R / R_base).
Efficiency = speedup / (R / R_base); the smallest point is the base (speedup 1, efficiency 1).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import math
from collections.abc import Iterable, Mapping, Sequence

SCALINGS = ("strong", "weak")
CSV_COLUMNS = (
    "nodes",
    "nproc_per_node",
    "ranks",
    "status",
    "wall_sec",
    "epoch_time_sec",
    "throughput_samples_per_sec",
    "speedup",
    "efficiency",
    "data_load_time_sec",
    "compute_time_sec",
    "data_fraction",
    "basis",
    "run_dir",
    "finding",
)


@dataclasses.dataclass(frozen=True, order=True)
class Point:
    """One configuration of the sweep."""

    nodes: int
    nproc_per_node: int

    @property
    def ranks(self) -> int:
        return self.nodes * self.nproc_per_node

    @property
    def name(self) -> str:
        return f"{self.nodes}x{self.nproc_per_node}"


@dataclasses.dataclass(frozen=True)
class PointResult:
    """What one run of the sweep produced (read from its run directory)."""

    point: Point
    ok: bool
    run_dir: str
    wall_sec: float | None = None
    metrics: tuple[Mapping[str, str], ...] = ()
    finding: str = ""  # explain's root cause when the point failed or is unhealthy


@dataclasses.dataclass(frozen=True)
class ScalingRow:
    point: Point
    status: str
    wall_sec: float | None
    epoch_time_sec: float | None
    throughput: float | None
    speedup: float | None
    efficiency: float | None
    data_sec: float | None
    compute_sec: float | None
    basis: str
    run_dir: str
    finding: str

    @property
    def data_fraction(self) -> float | None:
        if self.data_sec is None or self.compute_sec is None:
            return None
        total = self.data_sec + self.compute_sec
        return self.data_sec / total if total > 0 else None


def plan_points(nodes: Sequence[int], nproc_per_node: Sequence[int]) -> list[Point]:
    """Every nodes x processes combination, smallest world first (the base comes first)."""
    points = {Point(n, p) for n in nodes for p in nproc_per_node}
    return sorted(points, key=lambda p: (p.ranks, p.nodes))


def _mean(rows: Iterable[Mapping[str, str]], column: str, skip_first: bool) -> float | None:
    values = []
    for row in rows:
        text = (row.get(column) or "").strip()
        try:
            value = float(text)
        except ValueError:
            continue
        if math.isfinite(value):
            values.append(value)
    if skip_first and len(values) > 1:
        values = values[1:]  # the first epoch pays for warm-up (allocation, first batches)
    return sum(values) / len(values) if values else None


def scaling_rows(results: Sequence[PointResult], scaling: str) -> list[ScalingRow]:
    """Rows with speedup and efficiency against the smallest successful point."""
    if scaling not in SCALINGS:
        raise ValueError(f"scaling must be one of {SCALINGS}, not {scaling!r}")
    measured = []
    for result in results:
        rows = result.metrics
        measured.append(
            (
                result,
                _mean(rows, "epoch_time_sec", skip_first=True),
                _mean(rows, "throughput_samples_per_sec", skip_first=True),
                _mean(rows, "data_load_time_sec", skip_first=True),
                _mean(rows, "compute_time_sec", skip_first=True),
            )
        )
    ok = [m for m in measured if m[0].ok]
    use_throughput = bool(ok) and all(m[2] for m in ok)
    base = min(ok, key=lambda m: m[0].point.ranks) if ok else None
    out = []
    for result, epoch, throughput, data, compute in measured:
        speedup = efficiency = None
        if result.ok and base is not None:
            factor = result.point.ranks / base[0].point.ranks
            if use_throughput:
                speedup = throughput / base[2] if throughput and base[2] else None
            elif result.wall_sec and base[0].wall_sec:
                speedup = base[0].wall_sec / result.wall_sec
                speedup *= factor if scaling == "weak" else 1.0
            efficiency = speedup / factor if speedup is not None else None
        out.append(
            ScalingRow(
                point=result.point,
                status="ok" if result.ok else "failed",
                wall_sec=result.wall_sec,
                epoch_time_sec=epoch,
                throughput=throughput,
                speedup=speedup,
                efficiency=efficiency,
                data_sec=data,
                compute_sec=compute,
                basis="throughput" if use_throughput else "wall",
                run_dir=result.run_dir,
                finding=result.finding,
            )
        )
    return out


def _fmt(value: float | None, digits: int = 3) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def rows_csv(rows: Sequence[ScalingRow]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for r in rows:
        writer.writerow(
            [
                r.point.nodes,
                r.point.nproc_per_node,
                r.point.ranks,
                r.status,
                _fmt(r.wall_sec),
                _fmt(r.epoch_time_sec, 4),
                _fmt(r.throughput, 1),
                _fmt(r.speedup),
                _fmt(r.efficiency),
                _fmt(r.data_sec, 4),
                _fmt(r.compute_sec, 4),
                _fmt(r.data_fraction),
                r.basis,
                r.run_dir,
                r.finding,
            ]
        )
    return buffer.getvalue()


def rows_markdown(rows: Sequence[ScalingRow], scaling: str, cores: int | None) -> str:
    """The sweep as a markdown table, with the machine's core count (it bounds the result)."""
    lines = [
        f"# Scaling sweep ({scaling} scaling)",
        "",
        f"Machine: {cores or '?'} CPU cores. Ranks beyond the core count share cores, so "
        "efficiency falls there: a true result of this machine, not of the code.",
        "",
        "| nodes x procs | ranks | status | wall s | throughput/s | speedup | efficiency "
        "| data % | note |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        data = "" if r.data_fraction is None else f"{100 * r.data_fraction:.0f}"
        lines.append(
            f"| {r.point.name} | {r.point.ranks} | {r.status} | {_fmt(r.wall_sec, 1)} "
            f"| {_fmt(r.throughput, 0)} | {_fmt(r.speedup, 2)} | {_fmt(r.efficiency, 2)} "
            f"| {data} | {r.finding} |"
        )
    basis = rows[0].basis if rows else "wall"
    lines += ["", f"Speedup from {basis} against the smallest successful point."]
    return "\n".join(lines) + "\n"
