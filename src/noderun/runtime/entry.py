"""A training script's ``main``: one-line errors and documented exit codes on every launcher."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

from noderun.errors import NoderunError


def run_main(main: Callable[[], object]) -> int:
    """Call ``main``; a NoderunError becomes ONE line on stderr and its exit code (2 for bad
    input), printed by rank 0 only when every rank agreed on it.

    The line starts with the error type (``UsageError: ...``) so launchers that scan rank logs
    for ``...Error:`` lines show it as the reason the rank failed.
    """
    try:
        main()
    except NoderunError as err:
        from noderun.runtime.context import record_error

        record_error(err, err.exit_code)  # the launcher names this rank and passes the code on
        rank = os.environ.get("RANK") or os.environ.get("SLURM_PROCID") or "0"
        if rank == "0" or not getattr(err, "agreed", False):
            sys.stderr.write(f"{type(err).__name__}: {err}\n")
            sys.stderr.flush()
        return err.exit_code
    return 0
