"""Exit codes a training rank (and so a noderun job) ends with, besides 0 and 1.

- ``EXIT_USAGE`` (2): bad input, e.g. ``--resume`` pointing at a missing, partial, corrupt or
  incompatible checkpoint; nothing was started or overwritten.
- ``EXIT_PREEMPTED`` (75, EX_TEMPFAIL): stopped on purpose by SIGUSR1/SIGTERM after saving a
  checkpoint; run it again with ``--resume auto`` (or let SLURM requeue it).
- ``EXIT_STALLED`` (76): the launcher saw no progress for ``--stall-timeout`` seconds and, with
  ``--on-stall=kill``, tore the job down after writing ``RUN_DIR/stall-<time>.txt``; requeue it.
"""

EXIT_USAGE = 2
EXIT_PREEMPTED = 75
EXIT_STALLED = 76
PASSED_THROUGH = (EXIT_USAGE, EXIT_PREEMPTED)
