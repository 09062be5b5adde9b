"""Fault: the run directory's filesystem fills up during a run (a real 300 KiB tmpfs).

Seen failing before (issue 29): all 12 epochs trained, not one checkpoint written (only
``checkpoints/.epoch-0001.tmp``), nothing said; then noderun died with a Python traceback writing
run.json, which stayed ``running``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from noderun import disk_room
from tests.conftest import SCRIPTS, noderun, run_args

pytestmark = pytest.mark.slow


def test_a_full_disk_stops_the_run_in_one_line_and_keeps_the_last_checkpoint(
    tiny_fs: Path,
) -> None:
    run_dir = tiny_fs / "run"
    result = noderun(run_args(SCRIPTS / "fill_disk.py", run_dir, 1, 2), timeout=300)
    out = result.stdout + result.stderr
    assert result.returncode != 0, out
    assert "noderun: warning: only " in result.stderr  # said before anything started
    assert "trained all 12 epochs" not in out
    assert "0| noderun: error: rank 0: checkpoint " in out  # said by the rank that tried
    assert "[Errno 28] No space left on device" in out
    own = [ln for ln in result.stderr.splitlines() if "|" not in ln.split(" ")[0]]
    assert not any(ln.startswith("Traceback") for ln in own), result.stderr  # noderun's own
    last = result.stderr.strip().splitlines()[-1]
    assert "No space left on device" in last or "WriteError" in last, last
    checkpoints = sorted(p.name for p in (run_dir / "checkpoints").glob("epoch-*"))
    assert checkpoints and (run_dir / "checkpoints" / checkpoints[-1] / ".complete").exists()
    try:
        record = json.loads((run_dir / "run.json").read_text())
    except (OSError, ValueError):
        record = None
    if record is not None and record.get("status") == "running":  # could not be finalized:
        assert "run.json: [Errno 28]" in last  # then the reason is the last line


def test_the_room_rule_asks_for_a_few_checkpoints(tmp_path: Path) -> None:
    free = disk_room.free_bytes(tmp_path)
    assert free is not None
    assert disk_room.shortfall(tmp_path, checkpoint_bytes=free) is not None  # 3x does not fit
    assert disk_room.shortfall(tmp_path, checkpoint_bytes=1) is None
    (tmp_path / "checkpoints" / "epoch-0001").mkdir(parents=True)
    (tmp_path / "checkpoints" / "epoch-0001" / "state.pt").write_bytes(b"x" * 1000)
    (tmp_path / "checkpoints" / "epoch-0001" / ".complete").touch()
    assert disk_room.newest_checkpoint_size(tmp_path) == 1000


def test_submit_warns_of_too_little_room_before_anything_is_submitted(
    tiny_fs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`noderun submit` says the run directory's filesystem is short before sbatch: here the
    submission stops at sbatch (patched), so no cluster is needed and nothing is queued."""
    from noderun.backends import slurm
    from noderun.errors import NoderunError
    from tests.conftest import cli

    def no_sbatch(*_: object, **__: object) -> None:
        raise NoderunError("sbatch was reached (patched out)")

    monkeypatch.setattr(slurm, "require_command", lambda _name: None)
    monkeypatch.setattr(slurm, "sbatch_test", no_sbatch)
    script = SCRIPTS / "exit_with.py"
    result = cli(["submit", "--nodes", "1", "--run-dir", str(tiny_fs / "run"), str(script), "0"])
    lines = result.stderr.splitlines()
    assert lines and lines[0].startswith("noderun: warning: only "), result.stderr
    assert "sbatch was reached" in result.stderr and result.returncode != 0
