"""metrics.csv on rank 0 with the seed-004 columns, and per-epoch timing of data vs compute."""

from __future__ import annotations

import csv
import math
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import psutil

T = TypeVar("T")

COLUMNS: tuple[str, ...] = (
    "epoch",
    "train_loss",
    "val_loss",
    "val_mae",
    "val_rmse",
    "epoch_time_sec",
    "throughput_samples_per_sec",
    "data_load_time_sec",
    "compute_time_sec",
    "gpu_util_avg",
    "cpu_util_avg",
)


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return "nan" if math.isnan(value) else f"{value:.6g}"
    return str(value)


class MetricsLogger:
    """Appends one row per epoch to ``metrics.csv``; only the main rank writes.

    >>> log = MetricsLogger(Path("/tmp/m.csv"), is_main=True, extra_columns=["val_accuracy"])
    ... # doctest: +SKIP
    """

    def __init__(
        self, path: Path, is_main: bool = True, extra_columns: Sequence[str] = ()
    ) -> None:
        self.path = path
        self.is_main = is_main
        self.columns = (*COLUMNS, *(c for c in extra_columns if c not in COLUMNS))
        if is_main and not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "w", newline="") as handle:
                csv.writer(handle).writerow(self.columns)

    def log(self, **row: Any) -> None:
        """Write one row; values should already be reduced across ranks."""
        unknown = set(row) - set(self.columns)
        if unknown:
            raise ValueError(
                f"unknown metrics columns {sorted(unknown)}; declare them in extra_columns"
            )
        if not self.is_main:
            return
        with open(self.path, "a", newline="") as handle:
            csv.writer(handle).writerow([_cell(row.get(c)) for c in self.columns])


class EpochTimer:
    """Measures one epoch: data-loading time, compute time, samples, CPU and GPU utilisation."""

    def __init__(self) -> None:
        self.data_time = 0.0
        self.samples = 0
        self._start = time.perf_counter()
        psutil.cpu_percent(None)  # starts the CPU sampling window

    def iterate(self, batches: Iterable[T]) -> Iterator[T]:
        """Yield from ``batches``, timing how long each batch took to arrive."""
        iterator = iter(batches)
        while True:
            began = time.perf_counter()
            try:
                batch = next(iterator)
            except StopIteration:
                self.data_time += time.perf_counter() - began
                return
            self.data_time += time.perf_counter() - began
            yield batch

    def count(self, samples: int) -> None:
        self.samples += samples

    def stats(self) -> dict[str, float | None]:
        """epoch_time_sec, throughput, data/compute split, cpu_util_avg, gpu_util_avg."""
        elapsed = time.perf_counter() - self._start
        return {
            "epoch_time_sec": elapsed,
            "throughput_samples_per_sec": self.samples / elapsed if elapsed > 0 else 0.0,
            "data_load_time_sec": self.data_time,
            "compute_time_sec": max(elapsed - self.data_time, 0.0),
            "cpu_util_avg": psutil.cpu_percent(None),
            "gpu_util_avg": _gpu_utilization(),
        }


def _gpu_utilization() -> float | None:
    """Percent busy of this rank's GPU, or None without a GPU (or without NVML)."""
    try:
        import torch

        if not torch.cuda.is_available():
            return None
        return float(torch.cuda.utilization())
    except Exception:  # NVML missing or not permitted: leave the column empty
        return None


def read_metrics(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))
