"""A training script's ``main``: one-line errors and documented exit codes on every launcher."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

from noderun import failures
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
        # the launcher names this rank and passes the code on; before init() (a refusal of the
        # script's input) the record comes from the launcher's environment, and torch, which
        # the context imports, is not imported just to say so
        context = sys.modules.get("noderun.runtime.context")
        if context is None:
            failures.record(err, err.exit_code)
        else:
            context.record_error(err, err.exit_code)
        rank = os.environ.get("RANK") or os.environ.get("SLURM_PROCID") or "0"
        if rank == "0" or not getattr(err, "agreed", False):
            sys.stderr.write(f"{type(err).__name__}: {err}\n")
            sys.stderr.flush()
        return err.exit_code
    return 0
