"""Fault: a rank frozen by SIGSTOP (alive, silent). The stall watchdog names it and
``--on-stall=kill`` ends the job; nothing is left running (a stopped process included)."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from noderun.exit_codes import EXIT_STALLED
from tests.conftest import SCRIPTS, noderun, processes_running, run_args
from tests.stacks.conftest import path_with_py_spy

pytestmark = pytest.mark.slow
TIMEOUT = 5


def test_a_frozen_rank_is_named_and_the_job_ended(tmp_path: Path) -> None:
    script = tmp_path / f"frozen_{tmp_path.name}.py"
    shutil.copy(SCRIPTS / "frozen_rank.py", script)
    run_dir = tmp_path / "run"
    args = run_args(script, run_dir, nproc=1)  # 2 nodes x 1 rank: rank 1 is node 1's
    args = [*args[:-1], "--stall-timeout", str(TIMEOUT), "--on-stall", "kill", args[-1]]
    result = noderun(args, timeout=240, PATH=path_with_py_spy(), FROZEN_RANK="1")
    ended = time.time()
    assert result.returncode == EXIT_STALLED, result.stderr[-3000:]
    verdict = [ln for ln in result.stderr.splitlines() if ln.startswith("noderun: stalled-")]
    assert verdict, result.stderr[-3000:]
    assert verdict[0].startswith("noderun: stalled-rank: rank 1 on localhost/1 gave no stack")
    assert "stopped by a signal" in verdict[0]  # was "stalled-job: every rank (0) is in …"
    frozen_at = float((run_dir / "frozen_at").read_text())
    assert ended - frozen_at < TIMEOUT + 60  # detected within the timeout plus the stack dumps
    record = json.loads((run_dir / "run.json").read_text())
    assert record["status"] == "stalled"
    assert not processes_running(str(script))
