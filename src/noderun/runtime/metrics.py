"""metrics.csv on rank 0 with the seed-004 columns, and per-epoch timing of data vs compute.

Optional TensorBoard event files (``tensorboard=True``, needs ``noderun[tensorboard]``) go to
``RUN_DIR/tensorboard/`` beside the CSV, one scalar per column and epoch.
"""

from __future__ import annotations

import contextlib
import csv
import io
import math
import os
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import psutil

from noderun import atomic, timeline
from noderun.errors import UsageError
from noderun.runtime import heartbeat, write_errors

if TYPE_CHECKING:
    from noderun.runtime.context import Context

T = TypeVar("T")
GPU_SAMPLE_SEC = 1.0  # NVML reports over its own ~1 s window; sampling faster adds nothing

# the timeline stage that says this run writes metrics.csv (verify: missing is then a FAIL)
METRICS_STARTED = "metrics_started"

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

# step-based training (no epochs): one row per logged step
STEP_COLUMNS: tuple[str, ...] = (
    "step",
    "train_loss",
    "val_loss",
    "lr",
    "tokens_per_sec",
    "step_time_sec",
)


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return "nan" if math.isnan(value) else f"{value:.6g}"
    return str(value)


class MetricsLogger:
    """Appends one row per epoch to ``metrics.csv``; only the main rank writes. ``columns``
    replaces the epoch columns (e.g. ``STEP_COLUMNS``); the first one numbers the rows, and
    ``resume_after_epoch`` drops the rows numbered above it.

    >>> log = MetricsLogger(Path("/tmp/m.csv"), is_main=True, extra_columns=["val_accuracy"])
    ... # doctest: +SKIP
    """

    def __init__(
        self,
        path: Path,
        is_main: bool = True,
        extra_columns: Sequence[str] = (),
        tensorboard: bool = False,
        resume_after_epoch: int | None = None,
        columns: Sequence[str] = COLUMNS,
    ) -> None:
        self.path = path
        self.is_main = is_main
        self.columns = (*columns, *(c for c in extra_columns if c not in columns))
        self._board: Any = _summary_writer(path.parent / "tensorboard") if tensorboard else None
        if not is_main:
            return
        if resume_after_epoch is not None and path.exists():
            _truncate_after(path, resume_after_epoch)  # rows a resumed run will write again
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "w", newline="") as handle:
                csv.writer(handle).writerow(self.columns)
        if (path.parent / "logs").is_dir():  # in a run directory: verify expects the file now
            timeline.stamp(path.parent, METRICS_STARTED, "rank0")

    def log(self, **row: Any) -> None:
        """Write one row; values should already be reduced across ranks."""
        unknown = set(row) - set(self.columns)
        if unknown:
            raise ValueError(
                f"unknown metrics columns {sorted(unknown)}; declare them in extra_columns"
            )
        if not self.is_main:
            return
        buffer = io.StringIO()
        csv.writer(buffer).writerow([_cell(row.get(c)) for c in self.columns])
        self._append(buffer.getvalue())
        if self._board is not None:
            index = self.columns[0]
            step = int(row.get(index, 0) or 0)
            for name, value in row.items():
                if name != index and isinstance(value, int | float):
                    self._board.add_scalar(name, value, step)
            self._board.flush()

    def _append(self, text: str) -> None:
        """One row, whole or not at all: a failed write is cut off again (the file stays
        readable), said on this console with the room left, and stops training unless
        ``NODERUN_ON_WRITE_ERROR=warn``."""
        try:
            size = self.path.stat().st_size
        except OSError:
            size = None
        try:
            with open(self.path, "a", newline="") as handle:
                handle.write(text)
        except OSError as err:
            if size is not None:
                with contextlib.suppress(OSError):
                    os.truncate(self.path, size)
            mode = write_errors.policy()
            error = write_errors.write_error("metrics.csv", self.path, err)
            write_errors.say(error, mode)
            if mode == "stop":
                raise error from None

    def close(self) -> None:
        if self._board is not None:
            self._board.close()
            self._board = None


def _summary_writer(directory: Path) -> Any:
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        raise UsageError(
            "--tensorboard needs the tensorboard package, which is not installed",
            "pip install 'noderun[tensorboard]', or drop --tensorboard",
        ) from None
    return SummaryWriter(log_dir=str(directory))


def _truncate_after(path: Path, epoch: int) -> None:
    """Keep the header and the rows of epochs <= ``epoch`` (written atomically)."""
    with open(path, newline="") as handle:
        rows = list(csv.reader(handle))
    if not rows:
        return
    kept = [rows[0]] + [r for r in rows[1:] if r and r[0] and float(r[0]) <= epoch]
    buffer = io.StringIO(newline="")
    csv.writer(buffer).writerows(kept)
    atomic.write_text(path, buffer.getvalue())


class EpochTimer:
    """Measures one epoch: data-loading time, compute time, samples, CPU and GPU utilisation."""

    def __init__(self) -> None:
        self.data_time = 0.0
        self.samples = 0
        self._start = time.perf_counter()
        self._gpu = _has_gpu()
        self._gpu_samples: list[float] = []
        self._gpu_sampled_at = 0.0
        psutil.cpu_percent(None)  # starts the CPU sampling window

    def iterate(self, batches: Iterable[T], beat: bool = True) -> Iterator[T]:
        """Yield from ``batches``, timing how long each batch took to arrive; ``beat``: count
        a step for the stall watcher (off when ``batches`` already does, as
        ``Checkpointer.steps``)."""
        from noderun.runtime import profiling  # imports torch: not at module level

        iterator = iter(profiling.profile_batches(batches))
        clock = time.perf_counter
        while True:
            began = clock()
            try:
                batch = next(iterator)
            except StopIteration:
                self.data_time += clock() - began
                return
            self.data_time += clock() - began
            if beat:
                heartbeat.beat()
            yield batch

    def count(self, samples: int) -> None:
        self.samples += samples
        if self._gpu and time.perf_counter() - self._gpu_sampled_at >= GPU_SAMPLE_SEC:
            self._gpu_sampled_at = time.perf_counter()
            value = _gpu_utilization()
            if value is not None:
                self._gpu_samples.append(value)

    def reduced(self, ctx: Context, **means: float) -> dict[str, float]:
        """``stats()`` plus ``means`` averaged over ranks; throughput summed (whole job)."""
        local = {**{k: v for k, v in self.stats().items() if v is not None}, **means}
        row = ctx.all_reduce_mean(local)
        row["throughput_samples_per_sec"] *= ctx.world_size
        return row

    def stats(self) -> dict[str, float | None]:
        """epoch_time_sec, throughput, data/compute split, cpu_util_avg, gpu_util_avg."""
        elapsed = time.perf_counter() - self._start
        return {
            "epoch_time_sec": elapsed,
            "throughput_samples_per_sec": self.samples / elapsed if elapsed > 0 else 0.0,
            "data_load_time_sec": self.data_time,
            "compute_time_sec": max(elapsed - self.data_time, 0.0),
            "cpu_util_avg": psutil.cpu_percent(None),
            "gpu_util_avg": self._gpu_average(),
        }

    def _gpu_average(self) -> float | None:
        if not self._gpu:
            return None
        samples = self._gpu_samples or [v for v in [_gpu_utilization()] if v is not None]
        return sum(samples) / len(samples) if samples else None


def _has_gpu() -> bool:
    import torch

    return bool(torch.cuda.is_available())


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
