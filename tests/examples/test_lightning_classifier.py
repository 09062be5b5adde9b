"""The Lightning example under `noderun run` (torchrun mode), and its one-line refusals."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from tests.conftest import ROOT, noderun

EXAMPLE = ROOT / "examples" / "lightning_classifier.py"
pytest.importorskip("lightning", reason="the Lightning example needs noderun[lightning]")


def lightning_metrics(run_dir: Path) -> list[dict[str, str]]:
    (path,) = run_dir.glob("lightning_logs/version_*/metrics.csv")
    with path.open() as f:
        return list(csv.DictReader(f))


@pytest.mark.slow
def test_two_nodes_by_two_processes_train_and_log_into_the_run_dir(
    lightning_run: tuple[Path, str],
) -> None:
    """docs/lightning.md's commands, run as written (that page's test runs them only here)."""
    # run_snippet_of("docs/lightning.md", ...) in tests/conftest.py (shared with verify's tests):
    # noderun run ... --epochs 4; noderun verify: exit 0 asserted
    run_dir, stdout = lightning_run
    assert "All distributed processes registered. Starting with 4 processes" in stdout
    for rank in range(4):
        assert f"MEMBER: {rank + 1}/4" in (run_dir / "logs" / f"rank{rank}.log").read_text()
    rows = [r for r in lightning_metrics(run_dir) if r.get("val_accuracy")]
    assert len(rows) == 4
    assert float(rows[-1]["val_accuracy"]) > 0.85
    assert float(rows[-1]["val_loss"]) < float(rows[0]["val_loss"])
    assert "verdict: HEALTHY" in stdout, stdout  # the page's noderun verify


@pytest.mark.slow
@pytest.mark.parametrize(("flag", "value"), [("--num-nodes", "1"), ("--devices", "3")])
def test_a_shape_that_contradicts_the_launcher_is_one_line(
    tmp_path: Path, flag: str, value: str
) -> None:
    result = noderun(
        ["run", "--nnodes", "2", "--nproc-per-node", "1", "--run-dir", str(tmp_path / "r"),
         str(EXAMPLE), flag, value],
        timeout=120,
    )  # fmt: skip
    assert result.returncode != 0
    (line,) = [ln for ln in result.stdout.splitlines() if "error:" in ln][:1]
    assert f"{flag} {value} but the launcher started 2 node(s) x 1 process(es)" in line
    assert "hint: drop" in line
    assert not list((tmp_path / "r").glob("lightning_logs"))


def test_lightning_missing_is_one_line_with_the_install_command(tmp_path: Path) -> None:
    # a `lightning` that cannot be imported, first on the path: what a venv without it sees
    shadow = tmp_path / "shadow" / "lightning"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('No module named lightning')\n")
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, str(EXAMPLE)],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(shadow.parent), "PATH": "/usr/bin:/bin"},
        timeout=60,
    )
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        "lightning_classifier.py: error: Lightning is not installed; hint: pip install "
        "'noderun[lightning]' (or pip install 'lightning>=2.6,<2.7')"
    ]
