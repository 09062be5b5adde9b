"""Stall detection for a supervised job: no progress for ``timeout`` seconds is a stall.

Progress is any of: a line from any rank, a new row in metrics.csv, a step counted by the
runtime (``logs/rank<R>.progress``, ranks that call ``noderun.init()``), CPU time spent by a
rank on this machine. The clock starts at the first sign of life. On a stall the watcher takes
every rank's stack once, writes ``RUN_DIR/stall-<time>.txt``, prints the grouped summary with
the straggler named and, with ``--on-stall=kill``, stops the job (exit ``EXIT_STALLED``). It
watches again once progress resumes. One thread, one cheap poll per second at most.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO

import psutil

from noderun import notify
from noderun.plan.stall import OnStall, StallPolicy
from noderun.stacks import Snapshot, render
from noderun.stacks.files import progress_file, read_progress

CPU_BUSY = 0.1  # a rank using this share of a core between two polls is working
RESCAN_EVERY = 5.0  # seconds between searches for rank processes not found yet


class StallWatcher:
    """Watches one job; the supervisor feeds it output lines and asks whether it stopped the job."""

    def __init__(
        self,
        policy: StallPolicy,
        run_dir: Path,
        world_size: int,
        job_id: str | None = None,
        hosts: Sequence[str] = (),
        on_kill: Callable[[], None] | None = None,
        console: IO[str] | None = None,
    ) -> None:
        self.policy = policy
        self.run_dir = run_dir
        self.world_size = world_size
        self.job_id = job_id
        self.hosts = tuple(hosts)
        self.on_kill = on_kill
        self.console = console or sys.stderr
        self.interval = min(1.0, policy.timeout / 5)
        self.killed = False
        self.report: str | None = None  # "<verdict line>; report <path>" of the last stall
        self.lines = 0  # rank output lines seen: the supervisor counts them
        self._roots: tuple[int, ...] = ()
        self._ranks: dict[int, psutil.Process] = {}
        self._scanned_at = -RESCAN_EVERY
        self._cpu: dict[int, float] = {}
        self._seen: tuple[object, ...] = ()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def saw_output(self) -> None:
        self.lines += 1

    def start(self, roots: Sequence[int] = ()) -> None:
        """Watch from now; ``roots``: the local gang's processes (their ranks' CPU time)."""
        self._roots = tuple(roots)
        self._seen = self._state()
        self._thread = threading.Thread(target=self._loop, name="noderun-stall", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=30)

    def _loop(self) -> None:
        last: float | None = None  # time of the last progress; None before any sign of life
        fired = False
        while not self._stop.wait(self.interval):
            now = time.monotonic()
            if self._moved():
                last, fired = now, False
            elif last is not None and not fired and now - last >= self.policy.timeout:
                fired = True
                self._fire(now - last)
                if self.killed:
                    return

    def _moved(self) -> bool:
        state = self._state()
        moved = state != self._seen or self._cpu_busy()
        self._seen = state
        return moved

    def _state(self) -> tuple[object, ...]:
        """Output lines, metrics.csv's size and time, every rank's step counter."""
        try:
            info = (self.run_dir / "metrics.csv").stat()
            metrics: tuple[int, int] | None = (info.st_size, info.st_mtime_ns)
        except OSError:
            metrics = None
        counters = tuple(
            read_progress(progress_file(self.run_dir, rank)) for rank in range(self.world_size)
        )
        return (self.lines, metrics, counters)

    def _cpu_busy(self) -> bool:
        """True if a local rank used more than CPU_BUSY of a core since the last poll."""
        if not self._roots:
            return False
        now = time.monotonic()
        if len(self._ranks) < self.world_size and now - self._scanned_at >= RESCAN_EVERY:
            from noderun.stacks.capture import find_ranks

            self._scanned_at = now
            for rp in find_ranks(run_dir=self.run_dir, roots=self._roots):
                with contextlib.suppress(psutil.Error):
                    self._ranks.setdefault(rp.rank, psutil.Process(rp.pid))
        busy = False
        for rank, proc in list(self._ranks.items()):
            try:
                times = proc.cpu_times()
            except psutil.Error:
                del self._ranks[rank]
                continue
            used = times.user + times.system
            if used - self._cpu.get(rank, used) >= CPU_BUSY * self.interval:
                busy = True
            self._cpu[rank] = used
        return busy

    def take(self) -> Snapshot:
        """Every rank's stack: through srun on the job's nodes, or on this machine."""
        from noderun.stacks import job

        if self.job_id:
            return job.job_snapshot(self.job_id, self.run_dir, self.hosts)
        return job.local_snapshot(self.run_dir, self._roots or None, self.world_size)

    def _fire(self, quiet: float) -> None:
        try:
            snapshot = self.take()
        except Exception as err:  # a failed look must not kill the supervisor
            snapshot = Snapshot((), self.world_size, (f"stacks could not be taken: {err}",))
        stamp = time.localtime()
        path = self.run_dir / f"stall-{time.strftime('%Y%m%d-%H%M%S', stamp)}.txt"
        verdict = snapshot.verdict().line()
        with contextlib.suppress(OSError):
            path.write_text(report_text(snapshot, quiet, self.run_dir, stamp))
        self.report = f"{verdict}; report {path}"
        kill = self.policy.action is OnStall.KILL
        lines = [
            f"stall: no progress for {quiet:.0f} s; stacks of {len(snapshot.stacks)} rank(s), "
            f"report {path}:",
            *(f"  {line}" for line in render(snapshot).splitlines()),
            *snapshot.notes,
            verdict,
            "stopping the job (--on-stall=kill)"
            if kill
            else f"the job keeps waiting; `noderun stacks {self.run_dir}` shows the stacks now",
        ]
        self.console.write("".join(f"noderun: {line}\n" for line in lines))
        self.console.flush()
        if kill:  # the run's end tells --notify (event "stall")
            self.killed = True
            if self.on_kill is not None:
                self.on_kill()
        else:
            notify.notify_stall(self.run_dir, self.report, self.job_id, os.environ)


def report_text(snapshot: Snapshot, quiet: float, run_dir: Path, stamp: time.struct_time) -> str:
    """The stall report: when, the verdict line (what `noderun explain` reads), every stack."""
    sources = sorted({s.source for s in snapshot.stacks if s.source}) or ["none"]
    return "\n".join(
        [
            f"noderun stall report {time.strftime('%Y-%m-%d %H:%M:%S', stamp)} (local time), "
            f"pid {os.getpid()}",
            f"no progress for {quiet:.1f} s "
            "(rank output, steps, metrics.csv, CPU time of local ranks)",
            f"run dir {run_dir}; world size {snapshot.world_size}; stacks by {', '.join(sources)}",
            snapshot.verdict().line(),
            *snapshot.notes,
            "",
            render(snapshot, full=True),
            "",
        ]
    )
