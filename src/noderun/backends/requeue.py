"""``python -m noderun.backends.requeue JOB [--force]``: requeue a preempted SLURM job.

What a rank's ``Preemption`` asks of the launcher's layer, in a process of its own, so that no
rank imports the launcher's code: without ``--force`` the job is requeued only when it was
submitted requeueable. Exit 0: requeued; 3: not requeueable, nothing done; 1: scontrol failed,
its one-line reason on stderr.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Sequence

from noderun import notify
from noderun.backends import slurm

NOT_REQUEUEABLE = 3


def main(argv: Sequence[str] | None = None) -> int:
    # the requeue makes SLURM stop the job's processes, this one among them: it must live to
    # tell the rank that the requeue was done (SLURM's SIGKILL after KillWait still ends it)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    parser = argparse.ArgumentParser(prog="python -m noderun.backends.requeue")
    parser.add_argument("job")
    parser.add_argument("--force", action="store_true", help="requeue even if not requeueable")
    opts = parser.parse_args(argv)
    if not opts.force and not slurm.job_requeueable(opts.job):
        return NOT_REQUEUEABLE
    error = slurm.requeue(opts.job)
    if error:
        print(error, file=sys.stderr)
        return 1
    notify.notify_requeued(opts.job, os.environ)  # --notify: the launcher is stopped with us
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
