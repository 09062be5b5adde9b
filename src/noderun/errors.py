"""Error types: every error a user can cause says what is wrong and how to fix it."""

from __future__ import annotations


class NoderunError(Exception):
    """Base error. ``str(err)`` is one line: the problem, then the fix after ``hint:``."""

    exit_code = 1

    def __init__(self, problem: str, hint: str = "") -> None:
        self.problem = problem
        self.hint = hint
        super().__init__(f"{problem}; hint: {hint}" if hint else problem)


class UsageError(NoderunError):
    """Bad input from the user (options, paths, ports): exit code 2, nothing started."""

    exit_code = 2


class TopologyError(NoderunError):
    """The environment does not describe a consistent distributed job."""

    exit_code = 2


class MissingLauncherError(TopologyError):
    """Several tasks were allocated but python was started once, without srun/torchrun."""


class DeviceOrdinalError(TopologyError):
    """The device index is not a visible device (usually the global rank used as device)."""


class InconsistentTopologyError(TopologyError):
    """Ranks, sizes or addresses contradict each other."""


class RendezvousTimeoutError(NoderunError):
    """Some ranks never joined the rendezvous within the join timeout."""


def os_error_line(err: OSError) -> str:
    """``/runs/x/run.json: [Errno 28] No space left on device; hint: …`` (one line)."""
    where = f"{err.filename}: " if err.filename else ""
    what = f"[Errno {err.errno}] {err.strerror}" if err.strerror else str(err)
    return f"{where}{what}; hint: free space on that filesystem or fix its permissions"
