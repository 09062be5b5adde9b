"""The demo workload end to end: 2 nodes x 2 processes, demo settings, then `noderun verify`:
the commands of docs/launching.md, run as written (that page's test runs them only here)."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest

from noderun import checkpoint as public
from noderun.runtime import checkpoint
from noderun.runtime.metrics import COLUMNS
from tests.conftest import cli

pytestmark = pytest.mark.slow


def test_classifier_reaches_95_percent_and_verifies(demo_run: tuple[Path, str]) -> None:
    run_dir, stdout = demo_run  # run_snippet_of("docs/launching.md", ...) in tests/conftest.py
    assert "verdict: HEALTHY" in stdout
    assert "0:0| training on 4 ranks (gloo, cpu)" in stdout
    assert not any(line.startswith(("0:1|", "1:2|", "1:3|")) for line in stdout.splitlines())

    with open(run_dir / "metrics.csv", newline="") as handle:
        reader = csv.DictReader(handle)
        assert reader.fieldnames is not None
        assert tuple(reader.fieldnames[: len(COLUMNS)]) == COLUMNS
        assert "val_accuracy" in reader.fieldnames
        rows = list(reader)
    assert [int(r["epoch"]) for r in rows] == list(range(1, len(rows) + 1))
    assert float(rows[-1]["val_accuracy"]) >= 0.95
    assert float(rows[-1]["train_loss"]) < float(rows[0]["train_loss"])
    for row in rows:
        assert math.isfinite(float(row["val_loss"]))
        assert float(row["throughput_samples_per_sec"]) > 0
        assert float(row["data_load_time_sec"]) + float(row["compute_time_sec"]) == pytest.approx(
            float(row["epoch_time_sec"]), rel=0.05
        )
        assert row["val_mae"] == "" and row["gpu_util_avg"] == ""

    latest = checkpoint.latest(run_dir / "checkpoints")
    assert latest is not None
    state = public.load(latest)
    assert "model" in state and any(k.endswith("weight") for k in state["model"])
    assert len(checkpoint.checkpoints(run_dir / "checkpoints")) <= 3  # keep the latest k

    verify = cli(["verify", str(run_dir), "--json"])
    assert verify.returncode == 0, verify.stdout + verify.stderr
    report = json.loads(verify.stdout)
    assert report["healthy"] is True
    assert {c["check"]: c["status"] for c in report["checks"]}["checkpoint"] == "PASS"
