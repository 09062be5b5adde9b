"""proc_guard: a child started with the hook, or one that asked itself, ends when its parent
is SIGKILLed (without it, both children below live on, reparented)."""

from __future__ import annotations

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
