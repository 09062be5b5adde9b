"""Rank lines torchrun's tee dropped are taken from torchelastic's per-rank files.

torch's tail thread stops when the agent's workers are done and may not have read a rank's
last lines (pytorch/pytorch#143823). The agent here is a small stand-in that writes the
torchelastic files and tees only their first line, as the race leaves it: the supervisor
under test is the real one."""

from __future__ import annotations

import io
import sys
from pathlib import Path

from noderun.backends.local import LocalSupervisor, untold_lines
from noderun.plan.launch import Gang, NodeCommand

AGENT = """\
import os, sys
folder = os.path.join(sys.argv[1], "run_abc123", "attempt_0", "0")
os.makedirs(folder)
with open(os.path.join(folder, "stdout.log"), "w") as f:
    f.write("first\\nsecond\\nlast result\\n")
with open(os.path.join(folder, "stderr.log"), "w") as f:
    f.write("a warning\\n")
print("[default0]:first", flush=True)           # the tee passed on the first line only
print("[default0]:a warning", file=sys.stderr, flush=True)
"""


def _supervise(tmp_path: Path) -> tuple[str, Path]:
    run_dir = tmp_path / "run"
    elastic = run_dir / "logs" / "torchelastic" / "node0"
    earlier = elastic / "run_old999" / "attempt_0" / "0"  # an earlier attempt's folder
    earlier.mkdir(parents=True)
    (earlier / "stdout.log").write_text("from the earlier attempt\n")
    agent = tmp_path / "agent.py"
    agent.write_text(AGENT)
    gang = Gang(
        nnodes=1, nproc_per_node=1, master_addr="127.0.0.1", master_port=29500,
        run_dir=run_dir, script="train.py",
    )  # fmt: skip
    node = NodeCommand(0, "localhost", (sys.executable, str(agent), str(elastic)), {})
    console = io.StringIO()
    result = LocalSupervisor(gang.plan([node]), console=console).run()
    assert result.exit_code == 0
    return console.getvalue(), run_dir / "logs" / "rank0.log"


def test_lines_the_tee_dropped_reach_the_console_and_the_rank_log(tmp_path: Path) -> None:
    console, rank_log = _supervise(tmp_path)
    shown = [line.removeprefix("0:0| ") for line in console.splitlines() if line[:5] == "0:0| "]
    logged = rank_log.read_text().splitlines()
    for lines in (shown, logged):
        # the two streams are read by two threads: the teed lines come in either order
        assert set(lines[:2]) == {"first", "a warning"}, lines
        assert lines[2:] == ["second", "last result"], lines  # then the dropped ones, once
    assert "earlier attempt" not in console  # an earlier attempt's folder is not read again


def test_untold_lines_reads_as_torchs_tail_does(tmp_path: Path) -> None:
    path = tmp_path / "stdout.log"
    path.write_bytes(b"one\nbar\r50%\r100%\nbad \xff byte\nno newline")
    assert untold_lines(path, 0) == ["one", "bar", "50%", "100%", "bad \ufffd byte", "no newline"]
    assert untold_lines(path, 4) == ["bad \ufffd byte", "no newline"]
    assert untold_lines(path, 9) == []
    assert untold_lines(tmp_path / "missing.log", 0) == []
