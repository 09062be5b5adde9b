"""`noderun scale` end to end on this machine: the classifier over 1 and 2 nodes, a failing
point that does not stop the sweep, and bad input."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from tests.conftest import ROOT, noderun
from tests.docs.test_snippets import run_snippet_of

CLASSIFIER = ROOT / "examples" / "ddp_classifier.py"
FLAKY = """\
import os, sys
if int(os.environ["WORLD_SIZE"]) > 1:  # no torch: the scale verb is what is tested
    sys.exit("this script refuses to run on more than one rank")
print("scaling", os.environ["NODERUN_SCALING"], os.environ["NODERUN_SCALE_FACTOR"])
"""


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open() as f:
        return list(csv.DictReader(f))


@pytest.mark.slow
def test_classifier_sweep_writes_csv_png_markdown_that_add_up(tmp_path: Path) -> None:
    """The sweep of docs/scaling.md, run as written (that page's test runs it only here):
    1 and 2 nodes x 1 process of the classifier, 2 epochs each, into runs/scale."""
    run_snippet_of(
        "docs/scaling.md",
        "tests/scale/test_scale_verb.py::test_classifier_sweep_writes_csv_png_markdown_that_add_up",
        tmp_path,
    )  # exit 0 asserted
    out = tmp_path / "runs" / "scale"
    rows = read_csv(out / "scaling.csv")
    assert [(r["nodes"], r["ranks"], r["status"]) for r in rows] == [
        ("1", "1", "ok"),
        ("2", "2", "ok"),
    ]
    assert float(rows[0]["speedup"]) == 1.0 and float(rows[0]["efficiency"]) == 1.0
    speedup, efficiency = float(rows[1]["speedup"]), float(rows[1]["efficiency"])
    assert efficiency == pytest.approx(speedup / 2, abs=0.002)
    assert rows[0]["basis"] == "throughput"
    assert (out / "scaling.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    markdown = (out / "scaling.md").read_text()
    assert f"| 2x1 | 2 | ok | {float(rows[1]['wall_sec']):.1f} |" in markdown
    assert "CPU cores" in markdown
    for point in ("1x1", "2x1"):
        assert (out / point / "metrics.csv").is_file()


@pytest.mark.slow
def test_a_failing_point_is_reported_with_its_finding_and_the_sweep_goes_on(
    tmp_path: Path,
) -> None:
    script = tmp_path / "one_rank_only.py"
    script.write_text(FLAKY)
    out = tmp_path / "sweep"
    result = noderun(
        ["scale", "--nodes", "1,2", "--scaling", "weak", "--out", str(out), str(script)],
        timeout=300,
    )
    assert result.returncode == 1
    rows = read_csv(out / "scaling.csv")
    assert [r["status"] for r in rows] == ["ok", "failed"]
    assert rows[1]["finding"].startswith("rank-crashed: ")  # explain's root cause of the point
    assert "refuses to run on more than one rank" in (out / "2x1.log").read_text()
    assert "scaling weak 1" in (out / "1x1" / "logs" / "rank0.log").read_text()
    assert "1 point(s) failed: 2x1" in result.stderr


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--nodes", "1,0"], "--nodes"),
        (["--nodes", "a"], "not a whole number"),
        (["--nproc-per-node", ""], "at least one value"),
        (["--time", "5"], "--submit"),
    ],
)
def test_bad_input_is_one_line_exit_2(tmp_path: Path, args: list[str], words: str) -> None:
    result = noderun(["scale", *args, "--out", str(tmp_path / "s"), str(CLASSIFIER)])
    assert result.returncode == 2
    assert words in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "s").exists()


def test_missing_script_is_one_line(tmp_path: Path) -> None:
    result = noderun(["scale", "--out", str(tmp_path / "s"), str(tmp_path / "nope.py")])
    assert result.returncode == 2 and "not found" in result.stderr
