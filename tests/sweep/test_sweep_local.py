"""`noderun sweep` on this machine, 2 nodes x 1 process per point, 3 at once: a failing
point's cause in the table, a re-run that runs only what did not complete, --notify on end
and failure; and a plain script that does not import noderun (1 node, no torch: the sweep is
what is tested)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from tests.conftest import ROOT, noderun

pytestmark = pytest.mark.slow

TINY = str(ROOT / "tests" / "scripts" / "tiny_trainer.py")
PLAIN = """\
import argparse, os, sys
parser = argparse.ArgumentParser()
parser.add_argument("--width", type=int)
args = parser.parse_args()
if args.width > 8:
    sys.exit(f"width {args.width} is too wide")
print("plain width", args.width, "rank", os.environ["RANK"])
"""


def _rows(out: Path) -> dict[str, dict[str, str]]:
    with (out / "sweep.csv").open() as f:
        return {row["point"]: row for row in csv.DictReader(f)}


def test_a_sweep_reports_the_failed_point_and_a_rerun_continues(tmp_path: Path) -> None:
    out, notes = tmp_path / "sweep", tmp_path / "notes"
    notes.mkdir()
    argv = ["sweep", "--param", "cr=-1,1,9", "--nnodes", "2", "--max-parallel", "3",
            "--metric", "train_loss", "--out", str(out),
            "--notify", f'cat > "$(mktemp -p {notes})"',
            TINY, "--epochs", "2", "--crash-rank", "{cr}", "--crash-epoch", "1"]  # fmt: skip
    first = noderun(argv, timeout=300)
    assert first.returncode == 1, first.stdout + first.stderr
    rows = _rows(out)
    assert {p: (r["status"], r["verify"]) for p, r in rows.items()} == {
        "cr=-1": ("completed", "healthy"),
        "cr=1": ("failed", "unhealthy"),
        "cr=9": ("completed", "healthy"),
    }
    assert rows["cr=1"]["cause"].startswith("rank-crashed: ")  # explain's root cause
    assert "deliberate crash" in rows["cr=1"]["cause"] and rows["cr=9"]["train_loss"]
    table = first.stdout.splitlines()
    assert any(line.startswith("cr=1 ") and "rank-crashed" in line for line in table)
    assert (out / "sweep.png").read_bytes()[:4] == b"\x89PNG"
    assert "1 point(s) failed: cr=1" in first.stderr

    sent = [json.loads(p.read_text()) for p in notes.iterdir()]
    by_event: dict[str, list[dict[str, object]]] = {}
    for note in sent:
        by_event.setdefault(str(note["event"]), []).append(note)
    assert sorted(len(v) for v in by_event.values()) == [1, 1, 2], by_event.keys()
    assert {Path(str(n["run_dir"])).name for n in by_event["end"]} == {"cr=-1", "cr=9"}
    assert by_event["failure"][0]["status"] == "failed"
    assert by_event["failure"][0]["exit_code"] == 1
    assert [p["status"] for p in by_event["sweep_failure"][0]["points"]] == [  # type: ignore[union-attr]
        "completed", "failed", "completed"]  # fmt: skip

    done_before = (out / "cr=-1" / "run.json").stat().st_mtime_ns
    again = noderun(argv, timeout=300)
    assert again.returncode == 1
    assert "2 of 3 point(s) completed before, not run again" in again.stdout
    assert "sweep point cr=-1" not in again.stdout and "sweep point cr=1 " in again.stdout
    assert (out / "cr=-1" / "run.json").stat().st_mtime_ns == done_before
    record = json.loads((out / "cr=1" / "run.json").read_text())
    assert len(record["attempts"]) == 1  # the failed point ran again, in place
    assert _rows(out)["cr=-1"]["train_loss"] == rows["cr=-1"]["train_loss"]


def test_a_plain_script_sweep_substitutes_its_values(tmp_path: Path) -> None:
    script = tmp_path / "plain.py"
    script.write_text(PLAIN)
    out = tmp_path / "sweep"
    result = noderun(
        ["sweep", "--param", "w=4,16", "--max-parallel", "2",
         "--out", str(out), str(script), "--width={w}"],
        timeout=300,
    )  # fmt: skip
    assert result.returncode == 1, result.stdout + result.stderr
    rows = _rows(out)
    assert rows["w=4"]["status"] == "completed" and rows["w=4"]["verify"] == "healthy"
    assert rows["w=16"]["status"] == "failed" and rows["w=16"]["cause"].startswith("rank-crashed")
    assert "width 16 is too wide" in (out / "w=16" / "logs" / "rank0.log").read_text()
    assert "plain width 4 rank 0" in (out / "w=4" / "logs" / "rank0.log").read_text()
