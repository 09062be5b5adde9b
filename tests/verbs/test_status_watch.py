"""`noderun status --watch` in a real terminal (tmux): the live view redraws as a rank makes
progress and ends by itself, exit 0, once the run ends. The run is a run directory whose
launcher (this test, holding its lock) writes what a run writes: no training needed."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from noderun import rundir
from noderun.stacks.files import COUNTER, progress_file
from tests.conftest import wait_until

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
]


@pytest.fixture
def tmux(tmp_path: Path) -> Iterator[list[str]]:
    socket = tmp_path / "tmux.sock"
    base = ["tmux", "-S", str(socket)]
    subprocess.run(
        [*base, "new-session", "-d", "-x", "120", "-y", "30", "-s", "watch", "bash --norc"],
        check=True,
        env={"PATH": "/usr/bin:/bin", "TERM": "xterm-256color", "HOME": str(tmp_path)},
    )
    try:
        yield base
    finally:
        subprocess.run([*base, "kill-server"], capture_output=True, check=False)


def _screen(base: list[str]) -> str:
    return subprocess.run(
        [*base, "capture-pane", "-p", "-t", "watch"], capture_output=True, text=True, check=False
    ).stdout


def _progress(run_dir: Path, rank: int, count: int) -> None:
    progress_file(run_dir, rank).write_bytes(COUNTER.pack(count))


def test_watch_redraws_every_second_and_ends_with_the_run(tmp_path: Path, tmux: list[str]) -> None:
    run_dir = tmp_path / "run"
    (run_dir / "logs").mkdir(parents=True)
    record = {
        "backend": "local",
        "status": "running",
        "start_time": rundir.now_iso(),
        "hosts": ["hostA", "hostB"],
        "topology": {"nnodes": 2, "nproc_per_node": 1, "world_size": 2, "master_addr": "hostA"},
    }
    (run_dir / "run.json").write_text(json.dumps(record))
    for rank in (0, 1):
        (run_dir / "logs" / f"rank{rank}.log").write_text(f"rank {rank} started\n")
        _progress(run_dir, rank, 7)
    rundir.take_lock(run_dir)  # this test is the run's live launcher
    try:
        command = [sys.executable, "-m", "noderun", "status", "--watch", str(run_dir)]
        line = f"{shlex.join(command)}; echo WATCH-ENDED rc=$?"
        subprocess.run([*tmux, "send-keys", "-t", "watch", line, "Enter"], check=True)
        assert wait_until(lambda: "hostB" in _screen(tmux), 60), _screen(tmux)
        screen = _screen(tmux)
        assert "status   running" in screen and "updated" in screen, screen
        _progress(run_dir, 1, 4242)
        assert wait_until(lambda: "4242" in _screen(tmux), 15), _screen(tmux)
        record["status"] = "completed"
        record["duration_sec"] = 3.0
        (run_dir / "run.json").write_text(json.dumps(record))
    finally:
        rundir.release_lock(run_dir)
    assert wait_until(lambda: "WATCH-ENDED rc=0" in _screen(tmux), 15), _screen(tmux)
    assert "status   completed" in _screen(tmux)
