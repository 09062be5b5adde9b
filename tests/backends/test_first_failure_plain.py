"""A plain torch script (no noderun import) whose rank 3 dies while the others only lose it:
the launcher's last line, run.json and explain all name rank 3, never a peer that lost it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import SCRIPTS, cli, noderun, processes_running

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(
    ("mode", "reason"),
    [("sigkill", "killed by SIGKILL"), ("raise", "ValueError: deliberate failure on rank 3")],
)
def test_the_rank_that_failed_first_is_named_everywhere(
    tmp_path: Path, mode: str, reason: str
) -> None:
    script = tmp_path / f"plain_gang_{tmp_path.name}.py"
    shutil.copy(SCRIPTS / "plain_gang.py", script)
    run_dir = tmp_path / "run"
    result = noderun(
        ["run", "--nproc-per-node", "4", "--run-dir", str(run_dir), str(script)],
        PLAIN_MODE=f"{mode}:3",
    )
    assert result.returncode == 1, result.stderr[-2000:]
    last = result.stderr.strip().splitlines()[-1]
    assert "rank 3 (node 0, local rank 3) failed" in last and reason in last, result.stderr[-3000:]
    record = json.loads((run_dir / "run.json").read_text())
    assert record["failure"]["rank"] == 3
    explained = cli(["explain", str(run_dir)])
    assert explained.returncode == 1
    assert "  failed:   rank 3 (node 0" in explained.stdout, explained.stdout
    assert reason in explained.stdout
    assert not processes_running(str(script))
