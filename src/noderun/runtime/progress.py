"""Rank 0's view of an epoch: a rich progress bar on a terminal, nothing per step otherwise."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from typing import IO, Any, TypeVar

T = TypeVar("T")


class EpochProgress:
    """Wrap an epoch's batches; draws a transient bar only on rank 0 attached to a terminal.

    When the output is a pipe or a log file (``noderun run``, SLURM), it stays silent: the
    script prints one plain line per epoch instead.
    """

    def __init__(self, is_main: bool, stream: IO[str] | None = None) -> None:
        self.stream = stream or sys.stdout
        self.enabled = is_main and self.stream.isatty()
        self._bar: Any = None

    def track(self, batches: Iterable[T], total: int, description: str) -> Iterable[T]:
        """``batches`` with the bar advancing per batch; ``batches`` itself when silent (no
        generator layer between the training loop and its data)."""
        if not self.enabled:
            return batches
        return self._bar_over(batches, total, description)

    def _bar_over(self, batches: Iterable[T], total: int, description: str) -> Iterator[T]:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

        with Progress(
            "[progress.description]{task.description}",
            BarColumn(),
            MofNCompleteColumn(),
            TimeRemainingColumn(),
            console=Console(file=self.stream),
            transient=True,
        ) as bar:
            task = bar.add_task(description, total=total)
            for batch in batches:
                yield batch
                bar.advance(task)
