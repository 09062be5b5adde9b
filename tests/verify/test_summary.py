"""``noderun verify RUN --summary``: EXECUTION_SUMMARY.md holds the figures of the run itself."""

from __future__ import annotations

import csv
import json
import struct
import zlib
from pathlib import Path

import pytest

from noderun.verify.summary import _fmt
from tests.conftest import cli

pytestmark = pytest.mark.slow


def assert_valid_png(path: Path) -> tuple[int, int]:
    """Signature, then every chunk's CRC, ending in IEND; returns (width, height)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    offset, kinds = 8, []
    while offset < len(data):
        (length,) = struct.unpack(">I", data[offset : offset + 4])
        kind = data[offset + 4 : offset + 8]
        body = data[offset + 8 : offset + 8 + length]
        (crc,) = struct.unpack(">I", data[offset + 8 + length : offset + 12 + length])
        assert zlib.crc32(kind + body) == crc, kind
        kinds.append(kind)
        offset += 12 + length
    assert kinds[0] == b"IHDR" and kinds[-1] == b"IEND" and b"IDAT" in kinds
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def test_summary_of_the_classifier(demo_run: tuple[Path, str]) -> None:
    run_dir = demo_run[0]  # the demo of docs/launching.md: 2 x 2 ranks, 12 epochs
    result = cli(["verify", str(run_dir), "--summary"])
    assert result.returncode == 0, result.stdout
    summary = (run_dir / "EXECUTION_SUMMARY.md").read_text()
    assert f"summary: {run_dir / 'EXECUTION_SUMMARY.md'}" in result.stdout
    run = json.loads((run_dir / "run.json").read_text())
    with open(run_dir / "metrics.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    last = rows[-1]
    for column in ("train_loss", "val_loss", "val_accuracy", "throughput_samples_per_sec"):
        assert f"| {column} | {_fmt(float(last[column]))} |" in summary
    throughput = [float(r["throughput_samples_per_sec"]) for r in rows[1:]]
    assert f"mean {sum(throughput) / len(throughput):.4g} over rows 2-{len(rows)}" in summary
    assert f"{_fmt(run['duration_sec'])} s" in summary
    assert len(rows) == 12 and "2 node(s) x 2 = 4 ranks" in summary
    assert "| launcher seen by the ranks | torchrun |" in summary
    assert "| checkpoint | PASS |" in summary and "verify: **HEALTHY**" in summary
    assert "![losses per epoch](losses.png)" in summary
    assert "## SLURM accounting" not in summary and "Not in this run" not in summary
    assert assert_valid_png(run_dir / "losses.png") == (600, 400)


def test_summary_of_a_plain_script_names_what_it_lacks(plain_run: Path) -> None:
    run_dir = plain_run  # the run test_plain_scripts verifies: 2 x 1 ranks, a checkpoint
    result = cli(["verify", str(run_dir), "--summary"])
    assert result.returncode == 0, result.stdout
    summary = (run_dir / "EXECUTION_SUMMARY.md").read_text()
    assert "plain_ddp.py" in summary and "status: completed, exit code 0" in summary
    assert "exit code per node: 0: 0, 1: 0" in summary
    assert "## Not in this run" in summary
    assert "no runtime.json (the script does not call noderun.init())" in summary
    assert "final metrics and the loss plot: metrics.csv is missing" in summary
    assert not (run_dir / "losses.png").exists()
