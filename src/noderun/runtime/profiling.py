"""Where a rank's step time goes, over a window of steps (``NODERUN_PROFILE``, ``--profile``).

Every instant of a profiled step is charged to exactly one phase (``plan.profile.PHASES``), so
the phases add up to the step. A step runs from one batch fetch to the next; the hooks are:

- data: the fetch in ``EpochTimer.iterate``, ``Checkpointer.steps`` or ``ctx.profile(loader)``;
- forward: forward hooks on the model ``ctx.prepare`` returned;
- backward: from the gradient of the model's output to the end of autograd's own work;
- comm: DDP's wait for its gradient all_reduce after autograd is done (its exposed part: what
  overlaps the backward stays in backward), and ``ctx.all_reduce_*`` calls;
- optimizer: ``optimizer.step()`` (torch's global optimizer hooks);
- checkpoint: ``Checkpointer.save`` on the training thread;
- other: the rest (the loss, ``.item()``, logging).

Time after a loader ran out (evaluation, the epoch's checkpoint) until the next fetch is no
step: it is reported beside the steps as ``between_steps``. With CUDA the phases synchronize
the device while recording. Nothing is installed when profiling is off, and the hooks are
removed once the window has closed.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import socket
import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

import torch

from noderun import atomic
from noderun.plan.profile import (
    PHASES,
    PROFILE_DIR,
    PROFILE_ENV,
    ProfileSpec,
    parse_profile,
    rank_file,
    trace_file,
)

T = TypeVar("T")
_active: StepProfiler | None = None


def current() -> StepProfiler | None:
    """This rank's profiler while its window is still ahead or open; None otherwise."""
    return _active


class StepProfiler:
    """Charges wall time to phases for the steps of ``spec`` and writes ``rank<R>.json``."""

    def __init__(self, spec: ProfileSpec, rank: int, run_dir: Path, cuda: bool = False) -> None:
        self.spec = spec
        self.rank = rank
        self.directory = run_dir / PROFILE_DIR
        self.step = 0  # steps started so far
        self.steps: list[dict[str, Any]] = []
        self.between = dict.fromkeys(PHASES, 0.0)
        self.between_seconds = 0.0
        self.recording = False
        self._cuda = cuda
        self._phase = "other"
        self._stack: list[str] = []
        self._acc = dict.fromkeys(PHASES, 0.0)
        self._since = 0.0
        self._began = 0.0
        self._in_step = False
        self._depth = 0
        self._torch: Any = None
        self._hooks: list[Any] = []
        self._closed = False

    def install(self) -> None:
        """Global optimizer hooks; models come through ``watch``."""
        from torch.optim.optimizer import (
            register_optimizer_step_post_hook,
            register_optimizer_step_pre_hook,
        )

        self._hooks.append(register_optimizer_step_pre_hook(self._optimizer_begin))
        self._hooks.append(register_optimizer_step_post_hook(self._optimizer_end))

    def watch(self, model: torch.nn.Module) -> None:
        """Charge ``model``'s forward, and the backward through it, to their phases."""
        self._hooks.append(model.register_forward_pre_hook(self._forward_begin))
        self._hooks.append(model.register_forward_hook(self._forward_end))

    def _now(self) -> float:
        if self._cuda:
            torch.cuda.synchronize()
        return time.perf_counter()

    def _switch(self, phase: str) -> None:
        now = self._now()
        self._acc[self._phase] += now - self._since
        self._phase, self._since = phase, now

    def enter(self, phase: str) -> None:
        if self.recording:
            self._stack.append(self._phase)
            self._switch(phase)

    def leave(self) -> None:
        if self.recording and self._stack:
            self._switch(self._stack.pop())

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        self.enter(name)
        try:
            yield
        finally:
            self.leave()

    def fetch_begin(self) -> None:
        """A batch is asked for: the previous step (or the time between steps) ends here."""
        self._depth += 1
        if self._depth > 1 or self._closed:
            return  # a noderun iterator inside another: the outer one times the fetch
        now = self._now()
        self._close(now)
        if self.spec.covers(self.step + 1) and self.spec.trace and self._torch is None:
            self._start_trace()
        self.recording = self.spec.covers(self.step + 1) or self.spec.covers(self.step)
        self._acc = dict.fromkeys(PHASES, 0.0)
        self._stack.clear()
        self._phase, self._since, self._began = "data", now, now

    def fetch_end(self, got_batch: bool) -> None:
        """The fetch returned a batch (a step starts) or found the loader exhausted."""
        self._depth -= 1
        if self._depth > 0 or self._closed:
            return
        if got_batch:
            self.step += 1
            self._in_step = True
            if self._torch is not None:
                self._torch.step()
        if self.recording:
            self._switch("other")

    def _close(self, now: float) -> None:
        """Charge the time since the last switch and file the step or between-steps time."""
        if not self.recording:
            self._in_step = False
            return
        self._acc[self._phase] += now - self._since
        seconds = now - self._began
        if self._in_step and self.spec.covers(self.step):
            phases = {k: round(v, 6) for k, v in self._acc.items()}
            self.steps.append({"step": self.step, "seconds": round(seconds, 6), "phases": phases})
        elif not self._in_step and self.step < self.spec.stop:
            self.between_seconds += seconds
            for name, value in self._acc.items():
                self.between[name] += value
        self._in_step = False
        if self.step >= self.spec.stop:
            self.finish()

    def _forward_begin(self, module: torch.nn.Module, args: Any) -> None:
        self.enter("forward")

    def _forward_end(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        if not self.recording:
            return
        self.leave()
        tensor = _first_grad_tensor(output)
        if tensor is not None:
            tensor.register_hook(self._backward_begin)  # type: ignore[no-untyped-call]

    def _backward_begin(self, grad: torch.Tensor) -> None:
        if not self.recording:
            return
        self._switch("backward")
        engine = torch.autograd.Variable._execution_engine
        # Queued now, this callback runs before DDP's (queued at the first parameter's grad);
        # re-queued from there it runs after DDP has waited for its all_reduce.
        engine.queue_callback(self._autograd_done)

    def _autograd_done(self) -> None:
        if not self.recording:
            return
        self._switch("comm")
        torch.autograd.Variable._execution_engine.queue_callback(self._backward_end)

    def _backward_end(self) -> None:
        if self.recording:
            self._switch("other")

    def _optimizer_begin(self, *_: Any) -> None:
        self.enter("optimizer")

    def _optimizer_end(self, *_: Any) -> None:
        self.leave()

    def _start_trace(self) -> None:
        activities = [torch.profiler.ProfilerActivity.CPU]
        if self._cuda:
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        self._torch = torch.profiler.profile(activities=activities)
        self._torch.start()

    def finish(self, ended_early: bool = False) -> None:
        """Close the window: stop the trace, write ``rank<R>.json``, remove every hook."""
        global _active
        if self._closed:
            return
        self._closed = True
        self.recording = False
        for handle in self._hooks:
            handle.remove()
        self._hooks.clear()
        if _active is self:
            _active = None
        self.directory.mkdir(parents=True, exist_ok=True)
        record: dict[str, Any] = {
            "rank": self.rank,
            "host": socket.gethostname(),
            "window": [self.spec.start, self.spec.stop],
            "device": "cuda" if self._cuda else "cpu",
            "phases": list(PHASES),
            "steps": self.steps,
            "between_steps": {
                "seconds": round(self.between_seconds, 6),
                "phases": {k: round(v, 6) for k, v in self.between.items()},
            },
            "ended_before_window": ended_early and self.step < self.spec.stop,
            "trace": None,
        }
        if self._torch is not None:
            self._torch.stop()
            trace = self.directory / trace_file(self.rank)
            self._torch.export_chrome_trace(str(trace))
            table = self._torch.key_averages().table(sort_by="self_cpu_time_total", row_limit=30)
            atomic.write_text(self.directory / f"rank{self.rank}.ops.txt", table, durable=False)
            record["trace"] = trace.name
            self._torch = None
        atomic.write_text(
            self.directory / rank_file(self.rank), json.dumps(record, indent=2) + "\n"
        )


def _first_grad_tensor(output: Any) -> torch.Tensor | None:
    """The first tensor of a model's output (tensor, tuple, list, dict) that needs a gradient."""
    if isinstance(output, torch.Tensor):
        return output if output.requires_grad else None
    values: Iterable[Any] = ()
    if isinstance(output, Mapping):
        values = output.values()
    elif isinstance(output, list | tuple):
        values = output
    for value in values:
        found = _first_grad_tensor(value)
        if found is not None:
            return found
    return None


def install(rank: int, run_dir: Path, environ: Mapping[str, str], cuda: bool) -> None:
    """Start profiling this rank if ``NODERUN_PROFILE`` selects it (ValueError if unreadable)."""
    global _active
    spec = parse_profile(environ.get(PROFILE_ENV, ""))
    if spec is None or not spec.selects(rank) or _active is not None:
        return
    profiler = StepProfiler(spec, rank, run_dir, cuda)
    profiler.install()
    _active = profiler
    atexit.register(profiler.finish, ended_early=True)


def profile_batches(batches: Iterable[T]) -> Iterable[T]:
    """``batches`` with each fetch timed as a step's data phase; unchanged when off."""
    profiler = _active
    if profiler is None:
        return batches
    return _timed(profiler, batches)


def _timed(profiler: StepProfiler, batches: Iterable[T]) -> Iterator[T]:
    iterator = iter(batches)
    while True:
        profiler.fetch_begin()
        try:
            batch = next(iterator)
        except StopIteration:
            profiler.fetch_end(False)
            return
        except BaseException:
            profiler.fetch_end(False)
            raise
        profiler.fetch_end(True)
        yield batch


def phase(name: str) -> contextlib.AbstractContextManager[None]:
    """Charge the block to phase ``name`` when profiling, nothing otherwise."""
    profiler = _active
    return profiler.phase(name) if profiler is not None else contextlib.nullcontext()


def watch(model: torch.nn.Module) -> None:
    if _active is not None:
        _active.watch(model)
