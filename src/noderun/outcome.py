"""One outcome for every backend: the job's status, its exit code, run.json's fields and the
console's last line, decided in one place so a local run, a run inside an allocation and a
submitted job tell the same truth (a rank's bad input is exit 2, a preemption 75, everywhere).
No torch, no I/O."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from noderun.exit_codes import EXIT_PREEMPTED, EXIT_STALLED, EXIT_USAGE, PASSED_THROUGH

# status -> the end of the console's last line (run_dir is filled in)
_ENDINGS = {
    "completed": "job completed in {duration:.1f} s; run dir {run_dir} "
    "(check it with `noderun verify {run_dir}`)",
    "bad-input": f"the script refused its input (exit {EXIT_USAGE}, see the error above); "
    "all ranks stopped; run dir {run_dir}",
    "preempted": f"job preempted: a checkpoint was saved and every rank exited {EXIT_PREEMPTED}; "
    "continue it in place: run the same command again (same --run-dir {run_dir}) with the "
    "script's --resume auto",
    "stalled": f"job stalled and was stopped (exit {EXIT_STALLED}): {{failure}}; all ranks "
    "stopped; see `noderun explain {run_dir}`",
    "failed": "job failed: {failure}; all ranks stopped; see {log} "
    "(or `noderun explain {run_dir}`)",
    "interrupted": "interrupted by {interrupted_by}; all ranks stopped (run dir {run_dir})",
    "cancelled": "job cancelled by `noderun cancel` ({cancelled}); all ranks stopped; continue "
    "it in place: run the same command again (same --run-dir {run_dir}), with the script's "
    "--resume auto",
}


@dataclasses.dataclass(frozen=True)
class Outcome:
    """How a job ended, whichever backend ran it."""

    duration: float
    failure: str | None = None  # one line naming the first failing rank/node, host, and why
    failure_exit: int | None = None  # that rank's own exit code, when known
    failure_rank: int | None = None
    log: Path | None = None  # where to read more about the failure
    interrupted_by: str | None = None  # SIGINT/SIGTERM to noderun itself
    interrupt_code: int | None = None  # 128 + that signal
    stalled: str | None = None  # the stall report, when --on-stall=kill stopped the job
    cancelled: str | None = None  # `noderun cancel` ended it: "graceful" or "now"

    @property
    def status(self) -> str:
        if self.cancelled:
            return "cancelled"
        if self.interrupted_by:
            return "interrupted"
        if self.stalled:
            return "stalled"
        if self.failure is None:
            return "completed"
        return {EXIT_PREEMPTED: "preempted", EXIT_USAGE: "bad-input"}.get(
            self.failure_exit or 1, "failed"
        )

    @property
    def exit_code(self) -> int:
        """0, the signal's 128+N, 76 for a stall, a rank's 2 or 75 passed through, else 1."""
        if self.interrupted_by:
            return self.interrupt_code or 130
        if self.stalled:
            return EXIT_STALLED
        if self.failure is None:
            return 0
        return self.failure_exit if self.failure_exit in PASSED_THROUGH else 1  # type: ignore[return-value]

    def restart_refusal(self, previous: Outcome | None) -> str | None:
        """Why this ending must not restart the gang (``--max-restarts``), None when it may:
        torchrun restarts after any failure; noderun also stops on what a restart cannot fix."""
        status = self.status
        if status in ("completed", "interrupted", "preempted", "cancelled"):
            return f"the run {status}" if status != "completed" else "the run completed"
        if status == "bad-input":
            return f"bad input (exit {EXIT_USAGE}) fails the same way on every attempt"
        if (
            previous is not None
            and (previous.failure, previous.failure_exit)
            == (
                self.failure,
                self.failure_exit,
            )
            and previous.stalled == self.stalled
        ):
            return "the same failure as the previous attempt"
        return None

    def final_line(self, run_dir: Path) -> str:
        """The console's last line (stderr unless completed)."""
        return "noderun: " + _ENDINGS[self.status].format(
            duration=self.duration,
            run_dir=run_dir,
            failure=self.stalled or self.failure,
            log=self.log or run_dir / "logs",
            interrupted_by=self.interrupted_by,
            cancelled="graceful: every rank saved a checkpoint"
            if self.cancelled == "graceful"
            else "at once, without a checkpoint",
        )


def restart_refusal(
    outcome: Outcome, previous: Outcome | None, attempt: int, max_restarts: int
) -> str | None:
    """Why the gang is not started again (None: restart it)."""
    if outcome.status == "completed":
        return "completed"
    if attempt >= max_restarts:
        return f"--max-restarts {max_restarts} used up" if max_restarts else "no --max-restarts"
    return outcome.restart_refusal(previous)


def announce_restart(outcome: Outcome, attempt: int, max_restarts: int) -> str:
    """Say on stderr that the gang starts again (``attempt`` = restart n); run.json's line."""
    print(
        f"noderun: attempt {attempt} {outcome.status}: {outcome.failure or outcome.stalled}; "
        f"restarting all ranks (restart {attempt} of {max_restarts})",
        file=sys.stderr,
        flush=True,
    )
    return f"restarted the gang (restart {attempt} of {max_restarts})"
