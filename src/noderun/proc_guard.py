"""Children that end with the process that started them, however it ends (SIGKILL included).

Linux: ``prctl(PR_SET_PDEATHSIG)`` asks the kernel to signal a process when its parent dies;
the setting survives ``exec``, so a torchrun agent or an ``srun`` started with
``preexec_fn=die_with_parent_hook()`` goes when noderun goes, and a rank that calls
``die_with_parent()`` goes with its agent. Elsewhere (no prctl) ``die_with_parent`` falls back
to a daemon thread that watches the parent pid. Standard library only: the rank entry loads
this file by path, before anything of noderun or torch is imported.
"""

from __future__ import annotations

import ctypes
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping

PR_SET_PDEATHSIG = 1
POLL_SEC = 0.5  # the fallback's look at the parent pid


def _prctl() -> Callable[..., int] | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)  # this process's own symbols: libc's
        return libc.prctl  # type: ignore[no-any-return]
    except (OSError, AttributeError):
        return None


_PRCTL = _prctl()  # resolved once here: a preexec hook must not import or look things up


LAUNCHER_PID = "NODERUN__LAUNCHER_PID"  # set by a local launcher for the ranks it starts


def launcher_gone(environ: Mapping[str, str]) -> bool:
    """True when the local launcher that started this process's agent is no longer alive."""
    pid = environ.get(LAUNCHER_PID, "")
    if not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False


def die_with_parent(signum: int = signal.SIGKILL) -> bool:
    """This process gets ``signum`` when its parent dies (at once if it is already gone).
    True when the kernel does it, False when a watcher thread does (no prctl here)."""
    parent = os.getppid()
    if _PRCTL is not None and _PRCTL(PR_SET_PDEATHSIG, int(signum), 0, 0, 0) == 0:
        if os.getppid() != parent:  # the parent died before the request took effect
            os.kill(os.getpid(), signum)
        return True
    threading.Thread(target=_watch, args=(parent, signum), daemon=True).start()
    return False


def _watch(parent: int, signum: int) -> None:
    while os.getppid() == parent:
        time.sleep(POLL_SEC)
    os.kill(os.getpid(), signum)


def die_with_parent_hook(signum: int = signal.SIGKILL) -> Callable[[], None] | None:
    """A ``preexec_fn`` for ``subprocess.Popen``: the child gets ``signum`` when this process
    dies (None where prctl is missing: the child then only ends by teardown). Runs between
    fork and exec, so it does nothing but the one system call."""
    prctl = _PRCTL
    if prctl is None:
        return None
    parent = os.getpid()

    def hook() -> None:
        prctl(PR_SET_PDEATHSIG, int(signum), 0, 0, 0)
        if os.getppid() != parent:
            os.kill(os.getpid(), signum)

    return hook


def reap_exited() -> Iterator[tuple[int, int]]:
    """Collect every child that has ended, without waiting: (pid, wait status) each."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        yield pid, status
