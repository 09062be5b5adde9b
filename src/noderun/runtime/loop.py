"""The common training path as one object: ``noderun.TrainingLoop(ctx, model, optimizer)``.

It ties together the pieces a multi-node script otherwise wires by hand, each still usable
on its own: resume (``Checkpointer``), the per-epoch shuffle, skipping the batches a
mid-epoch checkpoint already trained, the data-vs-compute timer (``EpochTimer``), the
progress bar (``EpochProgress``), preemption (``Preemption``: checkpoint, then requeue or
exit 75), one metrics.csv row and one checkpoint per epoch (``MetricsLogger``).

    with noderun.init() as ctx:
        model = ctx.prepare(net)
        with noderun.TrainingLoop(ctx, model, optimizer, resume=args.resume) as loop:
            for epoch in loop.epochs(args.epochs):
                for images, labels in loop.steps(train_loader):
                    loss = ...; loss.backward(); optimizer.step()
                    loop.log(len(labels), train_loss=loss.item())
                row = loop.end_epoch(**evaluate(model))

Step-based training (no epochs: a token budget, an LLM fine-tune) gives ``max_steps``:

        with noderun.TrainingLoop(ctx, model, optimizer, resume=args.resume, max_steps=1000,
                                  log_every=10, checkpoint_every=100,
                                  evaluate=lambda: {"val_loss": ...}, eval_every=100) as loop:
            for batch in loop.iterate(train_loader):    # passes over the data as needed
                loss = ...; loss.backward(); optimizer.step()
                loop.end_step(train_loss=loss.item())   # every step, on every rank
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence, Sized
from typing import TYPE_CHECKING, Any, TypeVar

import torch

from noderun.errors import UsageError
from noderun.runtime import heartbeat, rng
from noderun.runtime.metrics import COLUMNS, STEP_COLUMNS, EpochTimer, MetricsLogger
from noderun.runtime.preemption import Preemption
from noderun.runtime.progress import EpochProgress
from noderun.runtime.training_state import Checkpointer, Position

if TYPE_CHECKING:
    from noderun.runtime.context import Context

T = TypeVar("T")
MIN_SEC_ENV = "NODERUN_CHECKPOINT_MIN_SEC"
# a write (serialization, fsyncs, rename) costs rank 0 ~8 ms of CPU and the GIL: at one per
# second it was ~2% of a 2-rank digits epoch, at one per 5 s ~0.4% (bench/loop_overhead.py)
DEFAULT_MIN_SEC = 5.0
# key of the running means in a mid-epoch checkpoint's ``extra``
PARTIAL_KEY = "noderun_loop"
# the metrics.csv columns of a step-based loop (``max_steps``) beyond STEP_COLUMNS
STEP_EXTRA = ("samples_per_sec",)


class TrainingLoop:
    """Epochs and steps with resume, timing, progress, preemption, metrics and checkpoints.

    ``metrics`` names the extra metrics.csv columns ``end_epoch`` will be given (the
    timer's columns and whatever ``log`` averages are always there); ``checkpoint_every``
    also checkpoints every that many steps inside an epoch (0: only at epoch ends).

    Every epoch end (and step checkpoint) takes a checkpoint; they are written at most one
    per ``checkpoint_min_sec`` (default 5 s, or ``NODERUN_CHECKPOINT_MIN_SEC``): one taken
    sooner waits for its turn in the background and gives way to a newer one. Epochs of 5 s
    or more are each written as before; shorter epochs do not pay a serialization, fsyncs
    and a rename each. The newest is written at once on close,
    preemption and exit (an exception included); only a killed process (SIGKILL, a lost
    node) can lose up to that much more training than with a write per epoch. 0: write each.

    Step-based mode (``max_steps=N``): ``iterate(loader)`` yields batches, pass after pass
    over the loader (``set_epoch(pass)`` for the shuffle), until global step N; every rank
    calls ``end_step(**values)`` once per step. Every ``log_every`` steps (and at N) the means
    since the last row are reduced over ranks and written as a metrics.csv row numbered by
    ``step`` (``STEP_COLUMNS``); every ``checkpoint_every`` steps (and at N) a checkpoint
    ``Position(global_step=n)`` (``step-0000000n``) is taken. A resume continues at the
    global step it saved, with the same batches and random streams (same world size).
    ``end_step(samples=, tokens=)`` adds ``samples_per_sec`` and ``tokens_per_sec`` (summed
    over ranks) to the rows.

    ``evaluate`` (step mode): a collective call returning metrics already reduced over ranks
    (e.g. ``{"val_loss": ...}``), run before the first step (a fresh run's row 0 holds the
    untrained model's; a resumed run checks the restored model), every ``eval_every`` steps
    and at ``max_steps``; its values join that step's row, its time is not step time.

    ``state`` is the script's own small state (e.g. samples seen), saved with every
    checkpoint (its ``extra``) and restored on resume. A script whose data position lives
    there gives ``iterate(batches, skip_trained=False)``: its batches already begin where the
    checkpoint stopped, so such a checkpoint resumes on any world size.
    """

    def __init__(
        self,
        ctx: Context,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer | None = None,
        scheduler: Any = None,
        *,
        resume: str | None = None,
        keep: int = 3,
        metrics: Sequence[str] = (),
        tensorboard: bool = False,
        checkpoint_every: int = 0,
        requeue: bool | None = None,
        checkpoint_min_sec: float | None = None,
        max_steps: int | None = None,
        log_every: int = 1,
        evaluate: Callable[[], Mapping[str, float]] | None = None,
        eval_every: int = 0,
    ) -> None:
        if (max_steps is not None and max_steps < 0) or log_every < 1 or eval_every < 0:
            raise UsageError(
                f"TrainingLoop(max_steps={max_steps}, log_every={log_every}, "
                f"eval_every={eval_every}) is out of range",
                "give max_steps >= 0 (or None for epochs), log_every >= 1 and eval_every >= 0",
            )
        if evaluate is not None and max_steps is None:
            raise UsageError(
                "TrainingLoop(evaluate=...) is the step mode's",
                "give max_steps=N too, or evaluate in your epoch loop and pass the values to "
                "end_epoch()",
            )
        self.ctx = ctx
        self.max_steps = max_steps
        self.log_every = log_every
        self.evaluate = evaluate
        self.eval_every = eval_every
        self.model = model
        self.checkpoint_every = checkpoint_every
        self.preemption = Preemption(ctx, requeue=requeue).__enter__()
        if checkpoint_min_sec is None:
            checkpoint_min_sec = min_sec_from_env()
        self.checkpointer = Checkpointer(
            ctx, model, optimizer, scheduler, keep=keep, min_commit_sec=checkpoint_min_sec
        )
        # before anything is written: a bad --resume changes nothing
        self.start = self.checkpointer.resume(resume)
        # the script's own state: saved with every checkpoint, restored here
        self.state: dict[str, Any] = {
            k: v for k, v in self.checkpointer.extra.items() if k != PARTIAL_KEY
        }
        self._columns = list(metrics)
        self._tensorboard = tensorboard
        self._metrics: MetricsLogger | None = None
        self.progress = EpochProgress(ctx.is_main)
        self.epoch = self.start.epoch
        self.step = 0
        self.global_step = self.start.global_step
        self.timer: EpochTimer | None = None
        self._sums: dict[str, float] = {}
        self._count = 0
        # step mode: the random streams as the checkpoint left them, restored again after the
        # resumed run has drawn (and skipped) the batches it already trained
        self._resume_rng = rng.capture() if max_steps is not None and self.global_step else None
        self._step_done = False
        self._samples = 0
        self._tokens = 0
        self._window_began = time.perf_counter()
        if max_steps is not None and self.start.global_step:
            partial = self.checkpointer.extra.get(PARTIAL_KEY, {})
            self._sums = {k: float(v) for k, v in partial.get("sums", {}).items()}
            self._count = int(partial.get("count", 0))

    def __enter__(self) -> TrainingLoop:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Wait for the last checkpoint, close metrics, give the signals back."""
        self.checkpointer.wait()
        if self._metrics is not None:
            self._metrics.close()
        self.preemption.__exit__()

    def epochs(self, total: int) -> Iterator[int]:
        """The epochs left to train, 1-based: after a resume, from the one it stopped in."""
        for epoch in range(self.start.epoch + 1, total + 1):
            self.epoch = epoch
            yield epoch

    def steps(self, batches: Iterable[T], description: str | None = None) -> Iterator[T]:
        """This epoch's batches: shuffled for the epoch, resumed ones skipped, timed, with a
        progress bar on rank 0; after each step, a preemption check on every rank."""
        epoch = self.epoch
        set_epoch = getattr(getattr(batches, "sampler", None), "set_epoch", None)
        if set_epoch is not None:
            set_epoch(epoch)  # the per-epoch shuffle of a ctx.loader()
        self.model.train()
        self.timer = EpochTimer()
        partial = self.checkpointer.extra.get(PARTIAL_KEY, {}) if self._resuming() else {}
        self._sums = {k: float(v) for k, v in partial.get("sums", {}).items()}
        self._count = int(partial.get("count", 0))
        total = len(batches) if isinstance(batches, Sized) else None
        tracked = self.progress.track(
            self.checkpointer.steps(batches, epoch), total or 0, description or f"epoch {epoch}"
        )
        for step, batch in self.timer.iterate(tracked, beat=False):  # Checkpointer.steps beats
            self.step = step
            yield batch
            self.global_step += 1
            heartbeat.position(self.global_step, epoch)
            here = Position(epoch - 1, step, self.global_step)
            if self.preemption.should_stop():
                self.preemption.exit(self.checkpointer.save(here, self._extra(), wait=True))
            if self.checkpoint_every and step % self.checkpoint_every == 0:
                self.checkpointer.save(here, self._extra())

    def iterate(self, batches: Iterable[T], skip_trained: bool = True) -> Iterator[T]:
        """Step mode (``max_steps``): batches until global step ``max_steps``, pass after pass
        over ``batches``; after a resume, the batches already trained are skipped (unless
        ``skip_trained=False``: ``batches`` already begin where the checkpoint stopped).
        With ``evaluate``, the model is evaluated first."""
        if self.max_steps is None:
            raise UsageError(
                "TrainingLoop.iterate() needs a step budget",
                "give TrainingLoop(..., max_steps=N), or use epochs() and steps() instead",
            )
        if self.evaluate is not None:
            evaluated = self._evaluated()
            if self.global_step == 0 and evaluated:  # a resumed run's row was written before
                self._logger(evaluated, steps=True).log(step=0, **evaluated)
        set_epoch = getattr(getattr(batches, "sampler", None), "set_epoch", None)
        skip = self.global_step if skip_trained else 0
        if not skip and self._resume_rng is not None:
            rng.restore(self._resume_rng)  # as the checkpoint left them
            self._resume_rng = None
        self.model.train()
        passes = 0
        self._window_began = time.perf_counter()  # the first row's step time: steps only
        while self.global_step < self.max_steps:
            if set_epoch is not None:
                set_epoch(passes)  # the per-pass shuffle of a ctx.loader()
            passes += 1
            empty = True
            for batch in batches:
                empty = False
                if skip:
                    skip -= 1
                    if not skip and self._resume_rng is not None:
                        rng.restore(self._resume_rng)  # as the checkpoint left them
                        self._resume_rng = None
                    continue
                heartbeat.beat()  # the stall watcher's step counter
                self._step_done = False
                yield batch
                if not self._step_done:
                    self.end_step()
                if self.global_step >= self.max_steps:
                    break
            if empty:
                raise UsageError(
                    "TrainingLoop.iterate() was given no batches",
                    "give it a loader with at least one batch on every rank",
                )

    def end_step(
        self, samples: int = 0, tokens: int = 0, **values: float
    ) -> dict[str, float] | None:
        """Step mode: end this global step on every rank. ``values`` (e.g. ``train_loss``) are
        averaged until the next metrics.csv row; every ``log_every`` steps the row is reduced
        over ranks; every ``eval_every`` steps ``evaluate``'s values join it; a row is written
        and returned (else None); every ``checkpoint_every`` steps, and at ``max_steps``, a
        checkpoint ``Position(global_step=n)``; then the preemption check. ``samples`` and
        ``tokens``: this rank's counts of this step, for the throughput columns."""
        if self.max_steps is None:
            raise UsageError(
                "TrainingLoop.end_step() is the step mode's",
                "give TrainingLoop(..., max_steps=N), or call end_epoch() in the epoch mode",
            )
        self._step_done = True
        self.global_step += 1
        n = self.global_step
        heartbeat.position(n)
        self._samples += samples
        self._tokens += tokens
        for name, value in values.items():
            self._sums[name] = self._sums.get(name, 0.0) + float(value)
        self._count += 1
        last = n >= self.max_steps
        row: dict[str, float] = {}
        if self.evaluate is not None and (last or (self.eval_every and n % self.eval_every == 0)):
            row.update(self._evaluated())
        if n % self.log_every == 0 or last:
            elapsed = max(time.perf_counter() - self._window_began, 1e-9)
            local = {k: v / max(self._count, 1) for k, v in self._sums.items()}
            local["step_time_sec"] = elapsed / max(self._count, 1)
            reduced = self.ctx.all_reduce_mean(local)
            rates = {
                name: count / elapsed
                for name, count in (
                    ("samples_per_sec", self._samples),
                    ("tokens_per_sec", self._tokens),
                )
                if count
            }
            if rates:
                reduced.update(self.ctx.all_reduce_sum(rates))
            row = {**reduced, **row}
            self._sums, self._count, self._samples, self._tokens = {}, 0, 0, 0
            self._window_began = time.perf_counter()
        if row:
            self._logger(row, steps=True).log(step=n, **row)
        here = Position(global_step=n)
        if self.preemption.should_stop():
            self.preemption.exit(self.checkpointer.save(here, self._extra(), wait=True))
        if last or (self.checkpoint_every and n % self.checkpoint_every == 0):
            self.checkpointer.save(here, self._extra())
        return row or None

    def _evaluated(self) -> dict[str, float]:
        """``evaluate``'s values; its time is moved out of the step-time window."""
        assert self.evaluate is not None
        began = time.perf_counter()
        values = {k: float(v) for k, v in self.evaluate().items()}
        self.model.train()
        self._window_began += time.perf_counter() - began
        return values

    def log(self, samples: int, **values: float) -> None:
        """Count this step's samples (throughput) and add to the epoch's running means."""
        if self.timer is not None:
            self.timer.count(samples)
        sums = self._sums
        for name, value in values.items():
            sums[name] = sums.get(name, 0.0) + float(value)  # a tensor too, without its graph
        self._count += 1

    def end_epoch(self, **metrics: float) -> dict[str, float]:
        """Reduce the epoch's timings and means over ranks, add ``metrics`` (already reduced,
        e.g. a validation pass), write the metrics.csv row, checkpoint; return the row."""
        if self.timer is None:
            raise RuntimeError("end_epoch() called before steps() of this epoch")
        means = {k: v / max(self._count, 1) for k, v in self._sums.items()}
        row = self.timer.reduced(self.ctx, **means)
        row.update(metrics)
        self._logger(row).log(epoch=self.epoch, **row)
        self.checkpointer.save(Position(self.epoch, 0, self.global_step), self.state)
        self.timer = None
        return row

    def _resuming(self) -> bool:
        return self.epoch == self.start.epoch + 1 and self.start.step > 0

    def _extra(self) -> dict[str, Any]:
        """A checkpoint's ``extra``: the script's ``state`` and the running means so far."""
        return {**self.state, PARTIAL_KEY: {"sums": dict(self._sums), "count": self._count}}

    def _logger(self, row: dict[str, float], steps: bool = False) -> MetricsLogger:
        """metrics.csv, opened at the first row: its columns (the epoch or the step mode's),
        then the loop's extra columns and the row's other names; rows past the checkpoint
        resumed from are redone."""
        if self._metrics is None:
            extra = dict.fromkeys([*(STEP_EXTRA if steps else ()), *self._columns, *row])
            self._metrics = MetricsLogger(
                self.ctx.run_dir / "metrics.csv",
                self.ctx.is_main,
                list(extra),
                tensorboard=self._tensorboard,
                resume_after_epoch=self.start.global_step if steps else self.start.epoch,
                columns=STEP_COLUMNS if steps else COLUMNS,
            )
        return self._metrics


def min_sec_from_env() -> float:
    """``NODERUN_CHECKPOINT_MIN_SEC`` as seconds (>= 0), else the default; bad: UsageError."""
    raw = os.environ.get(MIN_SEC_ENV, "").strip()
    if not raw:
        return DEFAULT_MIN_SEC
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value >= 0:  # also NaN
        raise UsageError(
            f"{MIN_SEC_ENV}={raw!r} is not a number of seconds",
            f"set it to 0 (write every checkpoint) or more, or unset it ({DEFAULT_MIN_SEC} s)",
        )
    return value
