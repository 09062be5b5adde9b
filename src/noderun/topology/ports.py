"""MASTER_PORT derived from the SLURM job id (pure). Probing free ports is I/O: it lives in
``noderun.backends.ports``."""

from __future__ import annotations

PORT_BASE = 20000
PORT_SPAN = 20000


def port_for_job(job_id: str | int) -> int:
    """Deterministic port for a SLURM job: two jobs sharing a node get different ports.

    >>> port_for_job(1234)
    21234
    """
    digits = "".join(ch for ch in str(job_id) if ch.isdigit()) or "0"
    return PORT_BASE + int(digits) % PORT_SPAN
