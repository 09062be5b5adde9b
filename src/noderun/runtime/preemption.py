"""Preemption: a signal sets a flag, ranks agree at a step boundary, save, then requeue or exit.

SIGUSR1 (``sbatch --signal=USR1@90``, ``scancel --signal=USR1 JOB``) and SIGTERM only set a
flag. ``should_stop()`` is called by every rank once per step; about once a second (at a step
all ranks agree on) the flag goes through an all-reduce (MAX) on a side gloo group, started
asynchronously at one exchange and read at the next, so every rank stops at the same step and
no step waits for it. Stopping takes about two seconds plus a step. After the checkpoint,
``exit()`` requeues the job (``scontrol requeue $SLURM_JOB_ID``) when it is a requeueable
SLURM job (or requeue was forced), else exits with ``EXIT_PREEMPTED`` (75, EX_TEMPFAIL:
"stopped on purpose, checkpoint saved, resume with ``--resume auto``").
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from types import FrameType
from typing import Any

import torch
import torch.distributed as dist

from noderun import cancel_request
from noderun.exit_codes import EXIT_PREEMPTED
from noderun.runtime.context import Context
from noderun.topology.model import slurm_job_id

SIGNALS = (signal.SIGUSR1, signal.SIGTERM)
# seconds a requeued rank waits for SLURM to stop it before exiting on its own
REQUEUE_WAIT = 120.0
# Test seam: "RANK:CALL" raises the flag on RANK at its CALL-th should_stop() (1-based)
DEBUG_ENV = "NODERUN_DEBUG_PREEMPT_AT"
# tests: "RANK|all:CALL" makes that rank wait at its CALLth should_stop() until a real signal
# arrives (writing logs/rank<R>.waiting-for-signal first, once per run directory), so a test
# signals at a known step instead of hoping the machine is slow enough
PAUSE_ENV = "NODERUN_DEBUG_WAIT_FOR_SIGNAL"
REQUEUE_ENV = "NODERUN_REQUEUE"
# ranks exchange the flag about once per CHECK_SEC (0: every step); NODERUN_PREEMPT_CHECK_SEC
CHECK_SEC = 1.0
CHECK_ENV = "NODERUN_PREEMPT_CHECK_SEC"
MAX_INTERVAL = 10_000
# the launcher's side of a requeue, run in a process of its own: a rank never imports the
# launcher's layer (scontrol's calls and their parsing live there)
REQUEUE_COMMAND = ("-m", "noderun.backends.requeue")
NOT_REQUEUEABLE = 3  # that command's answer when the job was not submitted requeueable
# (job id, forced) -> None: not requeueable, nothing done; "": requeued; else why it failed
Requeuer = Callable[[str, bool], str | None]


def requeue_wanted(environ: Mapping[str, str], forced: bool | None) -> bool | None:
    """True: requeue (forced, or ``NODERUN_REQUEUE=1``); False: never (not a SLURM job, or
    ``NODERUN_REQUEUE=0``); None: when SLURM says the job is requeueable (the default)."""
    if forced is not None:
        return forced
    setting = environ.get(REQUEUE_ENV, "auto").lower()
    if setting in ("0", "no", "false") or not environ.get("SLURM_JOB_ID"):
        return False
    return True if setting in ("1", "yes", "true") else None


def requeue_target(environ: Mapping[str, str]) -> str:
    """The job to requeue: ``<array job>_<task>`` in a job array, not the SLURM_JOB_ID one of
    its tasks shares with the array (``scontrol requeue`` of it requeued every task of the
    array, measured on the lab)."""
    return slurm_job_id(environ)


def requeue_by_command(job: str, forced: bool) -> str | None:
    """``python -m noderun.backends.requeue JOB [--force]`` (the default ``Requeuer``)."""
    argv = [sys.executable, *REQUEUE_COMMAND, job, *(["--force"] if forced else [])]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as err:
        return str(err)
    if done.returncode == NOT_REQUEUEABLE:
        return None
    lines = done.stderr.strip().splitlines()
    return "" if done.returncode == 0 else (lines[-1] if lines else f"exit {done.returncode}")


class Preemption:
    """Signal flag + step-boundary agreement; use as a context manager around training."""

    def __init__(
        self,
        ctx: Context,
        requeue: bool | None = None,
        signals: tuple[signal.Signals, ...] = SIGNALS,
        environ: Mapping[str, str] | None = None,
        check_sec: float = CHECK_SEC,
        requeuer: Requeuer = requeue_by_command,
    ) -> None:
        self.ctx = ctx
        self.requeue = requeue
        self.requeuer = requeuer
        self.signals = signals
        self.environ = os.environ if environ is None else environ
        self.received: str | None = None
        self.received_at: float | None = None
        self._calls = 0
        self._previous: dict[signal.Signals, Any] = {}
        self._group: Any = None
        self._work: Any = None
        self._exchange = torch.zeros(2, dtype=torch.float64)
        self.check_sec = (
            float(self.environ.get(CHECK_ENV, "")) if self.environ.get(CHECK_ENV) else check_sec
        )
        self._interval = 1  # steps between exchanges: 1 until the step time is known
        self._next_exchange = 1
        self._steps_exchanged = 1
        self._last_exchange_call = 0
        self._last_exchange_time = time.monotonic()
        rank, _, call = self.environ.get(DEBUG_ENV, "").partition(":")
        self._debug_call = int(call) if rank and int(rank) == ctx.rank else None
        rank, _, call = self.environ.get(PAUSE_ENV, "").partition(":")
        self._pause_call = int(call) if rank in ("all", str(ctx.rank)) else None

    def __enter__(self) -> Preemption:
        for signum in self.signals:
            self._previous[signum] = signal.signal(signum, self._on_signal)
        if self.ctx.distributed:
            # a side gloo group: the flag is a CPU tensor, and NCCL streams are left alone
            self._group = dist.new_group(backend="gloo")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._work is not None:
            self._work.wait()
            self._work = None
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        if self.received is None:
            self.received = signal.Signals(signum).name
            self.received_at = time.monotonic()

    def _wait_for_signal(self, limit: float = 300.0) -> None:
        """Test hook (PAUSE_ENV): announce the pause, then wait for the handler to run."""
        marker = self.ctx.run_dir / "logs" / f"rank{self.ctx.rank}.waiting-for-signal"
        if marker.exists():  # once per run directory: a resumed run does not wait again
            return
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(f"{self._calls}\n")
        deadline = time.monotonic() + limit
        while not self.requested and time.monotonic() < deadline:
            time.sleep(0.01)

    @property
    def requested(self) -> bool:
        """This rank received a signal (the others may not know yet)."""
        return self.received is not None

    def should_stop(self) -> bool:
        """Collective, once per step on every rank: True on all ranks at the same step.

        The flag travels with each rank's time since the last exchange; from the slowest
        rank's steps per second every rank computes the same next exchange step, about
        ``check_sec`` later, so the agreement costs one small all-reduce per ``check_sec``.
        """
        self._calls += 1
        if self._debug_call is not None and self._calls >= self._debug_call and not self.requested:
            self._on_signal(signal.SIGUSR1, None)
        if self._calls == self._pause_call:
            self._wait_for_signal()
        if self._group is None:
            return self.requested
        if self._calls < self._next_exchange:
            return False
        if self._work is not None:
            self._work.wait()
            self._work = None
            flag, slowest = self._exchange.tolist()
            if flag > 0:
                return True
            per_step = slowest / max(self._steps_exchanged, 1)
            self._interval = int(min(max(self.check_sec / max(per_step, 1e-9), 1), MAX_INTERVAL))
        now = time.monotonic()
        self._steps_exchanged = self._calls - self._last_exchange_call
        self._exchange = torch.tensor(
            [1.0 if self.requested else 0.0, now - self._last_exchange_time], dtype=torch.float64
        )
        self._last_exchange_call, self._last_exchange_time = self._calls, now
        self._work = dist.all_reduce(
            self._exchange, op=dist.ReduceOp.MAX, group=self._group, async_op=True
        )
        self._next_exchange = self._calls + self._interval
        return False

    def exit(self, saved: object = None) -> None:
        """After the checkpoint: requeue (and wait to be stopped) or exit ``EXIT_PREEMPTED``."""
        requeued = False
        if self.ctx.is_main:
            requeued = self._requeue()
        requeued = self.ctx.broadcast_object(requeued)
        origin = self.received or "a signal to another rank"
        if cancel_request.requested(self.ctx.run_dir):
            origin = f"`noderun cancel` ({origin})"
        after = (
            f" {time.monotonic() - self.received_at:.1f} s after it"
            if self.received_at is not None
            else ""
        )
        then = (
            "job requeued, it resumes from the checkpoint"
            if requeued
            else f"exiting with {EXIT_PREEMPTED} (resume with --resume auto)"
        )
        self.ctx.print(f"noderun: preempted by {origin}; checkpoint {saved} saved{after}; {then}")
        self.__exit__()
        self.ctx.shutdown()
        sys.stdout.flush()
        if requeued:
            for signum in self.signals:
                signal.signal(signum, signal.SIG_DFL)  # SLURM's SIGTERM now ends us at once
            deadline = time.monotonic() + REQUEUE_WAIT
            while time.monotonic() < deadline:
                time.sleep(1.0)
        raise SystemExit(EXIT_PREEMPTED)

    def _requeue(self) -> bool:
        wanted = requeue_wanted(self.environ, self.requeue)
        if wanted is False or cancel_request.requested(self.ctx.run_dir):
            return False
        job = requeue_target(self.environ)
        error = self.requeuer(job, wanted is True)
        if error is None:  # not submitted requeueable
            return False
        if error:
            sys.stderr.write(
                f"noderun: scontrol requeue {job} failed: {error}"
                f"; exiting with {EXIT_PREEMPTED} instead\n"
            )
            return False
        return True
