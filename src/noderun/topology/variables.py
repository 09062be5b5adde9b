"""The one reader of launcher variables' numbers (SLURM_*, torchrun's, Open MPI's). Pure.

A variable that is set but is not an integer is refused in one line naming it, wherever it is
read (the rank's ``Topology``, the node entry's ``NodeSpec``): taking it as 0 or as absent
would put two processes on one rank.
"""

from __future__ import annotations

from collections.abc import Mapping

from noderun.errors import InconsistentTopologyError


def read_int(environ: Mapping[str, str], *names: str) -> int | None:
    """The first of ``names`` that is set, as an integer; None when none is set.

    >>> read_int({"SLURM_NNODES": "2"}, "SLURM_STEP_NUM_NODES", "SLURM_NNODES")
    2
    >>> read_int({"SLURM_PROCID": ""}, "SLURM_PROCID") is None
    True
    """
    for name in names:
        raw = environ.get(name)
        if raw is None or not raw.strip():
            continue
        try:
            return int(raw)
        except ValueError:
            raise InconsistentTopologyError(
                f"{name}={raw!r} is not an integer", f"unset {name} or set it to a number"
            ) from None
    return None
