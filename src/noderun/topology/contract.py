"""RankContract: what noderun's launcher tells every rank it starts, beyond torch's own variables.

The contract has its own names, ``NODERUN__<FIELD>`` (two underscores). A user option's
variable is ``NODERUN_`` + the flag's name (``--run-dir`` → ``NODERUN_RUN_DIR``) and a flag name
starts with a letter, so no option can ever be read from, or leak into, a contract variable: a
rank that itself runs ``noderun …`` does not take its launcher's run directory as its own default.

Ranks started before the contract had its names (an old generated sbatch script, a user who
exported ``NODERUN_RUN_DIR`` for plain ``torchrun``/``srun``) set the option names; ``from_env``
reads them as a fallback. Standard library only (``rank_entry.py`` mirrors ``VARIABLES``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import secrets
from collections.abc import Callable, Mapping

PREFIX = "NODERUN__"
# field -> (contract variable[, the option-style name read when the contract one is absent])
VARIABLES: dict[str, tuple[str, ...]] = {
    "run_dir": ("NODERUN__RUN_DIR", "NODERUN_RUN_DIR"),
    "node_rank": ("NODERUN__NODE_RANK", "NODERUN_NODE_RANK"),
    "join_timeout": ("NODERUN__JOIN_TIMEOUT", "NODERUN_JOIN_TIMEOUT"),
    "restart_count": ("NODERUN__RESTART_COUNT", "NODERUN_RESTART_COUNT"),
    "max_restarts": ("NODERUN__MAX_RESTARTS", "NODERUN_MAX_RESTARTS"),
    "mode": ("NODERUN__MODE",),  # no older name: older launchers never said it
    "job_token": ("NODERUN__JOB_TOKEN", "NODERUN_JOB_TOKEN"),
}
_READ: dict[str, Callable[[str], object]] = {
    "run_dir": str,
    "node_rank": int,
    "join_timeout": float,
    "restart_count": int,
    "max_restarts": int,
    "mode": str,
    "job_token": str,
}


@dataclasses.dataclass(frozen=True)
class RankContract:
    """The launcher → rank variables; ``None`` means unset (not started by that launcher part).

    >>> RankContract(run_dir="/runs/a", node_rank=1).to_env()
    {'NODERUN__RUN_DIR': '/runs/a', 'NODERUN__NODE_RANK': '1'}
    """

    run_dir: str | None = None  # the run directory: logs, timeline, progress counters
    node_rank: int | None = None  # the node this rank's agent is (console prefix, ``stacks``)
    join_timeout: float | None = None  # seconds the fail-fast rendezvous waits for every rank
    restart_count: int | None = None  # which whole-gang restart this is (0: first start)
    max_restarts: int | None = None  # --max-restarts of the launch
    # "srun": one task per rank, no torchrun agent, although the ranks see torchrun's variables
    mode: str | None = None
    # a random value of this launch: noderun's own listeners (the check-in gate) drop a
    # connection that does not bring it (another job, a port scanner)
    job_token: str | None = None

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> RankContract:
        """Contract names first, then the old option-style names; unreadable values are unset."""
        values: dict[str, object] = {}
        for field, read in _READ.items():
            text = _lookup(environ, field)
            if text is not None:
                with contextlib.suppress(ValueError):  # unreadable: unset, the default applies
                    values[field] = read(text)
        return cls(**values)  # type: ignore[arg-type]

    def to_env(self) -> dict[str, str]:
        """The set fields under their contract names (never the option-style names)."""
        env: dict[str, str] = {}
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if value is not None:
                text = f"{value:g}" if isinstance(value, float) else str(value)
                env[VARIABLES[field.name][0]] = text
        return env

    @staticmethod
    def variable(environ: Mapping[str, str], field: str) -> str:
        """The variable ``field`` is read from in ``environ`` (its contract name when unset)."""
        return next((n for n in VARIABLES[field] if environ.get(n)), VARIABLES[field][0])

    @staticmethod
    def names() -> tuple[str, ...]:
        """Every variable ``from_env`` reads, contract names first (what a rank's env shows)."""
        return tuple(v[0] for v in VARIABLES.values()) + tuple(
            n for v in VARIABLES.values() for n in v[1:]
        )


def _lookup(environ: Mapping[str, str], field: str) -> str | None:
    for name in VARIABLES[field]:
        if environ.get(name):
            return environ[name]
    return None


def job_token(environ: Mapping[str, str]) -> dict[str, str]:
    """``{NODERUN__JOB_TOKEN: <random>}`` for a launch whose environment has none yet (``{}``
    when it has: ``noderun submit`` gave the batch job one, its steps keep it)."""
    name = VARIABLES["job_token"][0]
    return {} if environ.get(name) else {name: secrets.token_hex(16)}
