"""proc_guard: a child started with the hook, or one that asked itself, ends when its parent
is SIGKILLed (without it, both children below live on, reparented)."""

from __future__ import annotations

import os
import subprocess
import sys

import psutil
import pytest

PARENT = """
import os, signal, subprocess, sys
from noderun import proc_guard
hooked = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                          preexec_fn=proc_guard.die_with_parent_hook())
asked = subprocess.Popen([sys.executable, "-c",
    "import time; from noderun import proc_guard; proc_guard.die_with_parent(); "
    "print('ready', flush=True); time.sleep(60)"], stdout=subprocess.PIPE, text=True)
asked.stdout.readline()
print(hooked.pid, asked.pid, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl is Linux's")
def test_children_end_with_a_sigkilled_parent() -> None:
    out = subprocess.run([sys.executable, "-c", PARENT], capture_output=True, text=True, timeout=60)
    pids = [int(p) for p in out.stdout.split()]
    assert len(pids) == 2, out.stderr
    children = []
    for pid in pids:
        try:
            children.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            continue
    _, alive = psutil.wait_procs(children, timeout=5)
    left = [p for p in alive if p.status() != psutil.STATUS_ZOMBIE]
    for proc in left:
        proc.kill()
    assert not left


def test_a_rank_whose_launcher_is_already_gone_knows_it() -> None:
    """The window the parent-death signal cannot cover: the launcher (and so the agent) died
    before the rank asked for the signal. Seen once under load: two ranks outlived a
    SIGKILLed `noderun run` (tests/faults/test_launcher_killed.py)."""
    from noderun import proc_guard

    ended = subprocess.Popen(["true"])
    ended.wait()
    assert proc_guard.launcher_gone({proc_guard.LAUNCHER_PID: str(ended.pid)})
    assert not proc_guard.launcher_gone({proc_guard.LAUNCHER_PID: str(os.getpid())})
    assert not proc_guard.launcher_gone({})
