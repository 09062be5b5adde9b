"""Issue 29, item 1 for the FLARE site launcher: the FLARE client that started
``python -m noderun.flare.site_launch`` SIGKILLed (its job aborted hard, an OOM kill) leaves
nothing running. The site launcher asked for SIGTERM at its parent's death, and ends its ranks
as an interrupted run does. Without proc_guard.die_with_parent in site_launch.main the
launcher and both ranks live on, reparented (seen when the call is removed)."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from tests.conftest import SCRIPTS, clean_env, processes_running, wait_until

pytestmark = pytest.mark.slow

CLIENT = """
import os, signal, subprocess, sys
site = subprocess.Popen([sys.executable, "-m", "noderun.flare.site_launch", "--site", "site-1",
                         "--nproc-per-node", "2", sys.argv[1], "0", "99"])
print(site.pid, flush=True)
sys.stdin.readline()  # the test says when the ranks are up
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_sigkilled_flare_client_leaves_no_site_launcher_nor_rank(tmp_path: Path) -> None:
    script = tmp_path / f"site_rank_{tmp_path.name}.py"  # ranks that wait to be stopped
    shutil.copy(SCRIPTS / "exit_with.py", script)
    client = subprocess.Popen(
        [sys.executable, "-c", CLIENT, str(script)],
        cwd=tmp_path, env=clean_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert client.stdin is not None and client.stdout is not None
    site = psutil.Process(int(client.stdout.readline()))

    def ranks() -> list[psutil.Process]:
        with contextlib.suppress(psutil.Error):
            children = site.children(recursive=True)
            return [p for p in children if any("rank_entry.py" in a for a in p.cmdline()[:3])]
        return []

    try:
        assert wait_until(lambda: len(ranks()) >= 2, 120), "the ranks never started"
        family = [site, *site.children(recursive=True)]
        client.stdin.write("go\n")
        client.stdin.flush()
        client.wait(10)
        _, alive = psutil.wait_procs(family, timeout=15)
        left = [p for p in alive if p.status() != psutil.STATUS_ZOMBIE]
        assert not left, [p.cmdline() for p in left]
        assert not processes_running(str(script))
    finally:
        for proc in [site, *processes_running(str(script))]:
            if proc.is_running():
                proc.kill()
