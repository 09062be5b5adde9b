"""Seed 004: the traffic-speed generator, and the regression workload beating persistence."""

from __future__ import annotations

import csv
import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from noderun.runtime.metrics import COLUMNS
from tests.conftest import ROOT, cli, noderun

SCRIPT = str(ROOT / "examples" / "traffic_regression.py")


def _example_module(name: str):  # type: ignore[no-untyped-def]
    """An example's helper module (examples/ is not a package: scripts import it by name)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "examples" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


traffic = _example_module("traffic_data")
TWO_BY_TWO = ["run", "--nnodes", "2", "--nproc-per-node", "2"]
SUBMIT = ["submit", "--nodes", "2", "--nproc-per-node", "2", "--time", "10", "--wait"]
CFG = traffic.TrafficConfig(sensors=4, days=14, seed=3)


def at(cfg: traffic.TrafficConfig, hour: float, weekdays: bool) -> np.ndarray:
    """Step indices of ``hour`` o'clock on weekdays (or weekend days)."""
    days = [d for d in range(cfg.days) if (d % 7 < 5) == weekdays]
    return np.array([d * cfg.steps_per_day + int(hour * 60) // cfg.interval_min for d in days])


def test_generator_is_seeded_and_shaped() -> None:
    speeds = traffic.generate_speeds(CFG)
    assert speeds.shape == (14 * 288, 4) and speeds.dtype == np.float32
    assert np.array_equal(speeds, traffic.generate_speeds(CFG))
    assert not np.array_equal(speeds, traffic.generate_speeds(traffic.TrafficConfig(4, 14, 5, 4)))
    assert speeds.min() >= 3.0 and speeds.max() <= 80.0
    with pytest.raises(ValueError, match="interval divides 1440"):
        traffic.generate_speeds(traffic.TrafficConfig(interval_min=7))


def test_generator_has_rush_hours_weekends_incidents_and_noise() -> None:
    speeds = traffic.generate_speeds(CFG)
    night = speeds[at(CFG, 3, True)].mean()
    evening = speeds[at(CFG, 17.25, True)].mean()
    morning = speeds[at(CFG, 7.75, True)].mean()
    assert night > 60 and night - evening > 15 and night - morning > 8
    assert speeds[at(CFG, 17.25, False)].mean() - evening > 12  # weekends have no evening rush
    # incidents: readings far below what is usual for that sensor at that time of day
    daily = speeds.reshape(CFG.days, CFG.steps_per_day, CFG.sensors)
    usual = np.median(daily, axis=0)
    assert ((usual - daily) > 20).sum() > 10
    # noise: consecutive readings differ, but only by a few mph most of the time
    steps = np.abs(np.diff(speeds, axis=0))
    assert 0.5 < np.median(steps) < 4
    assert len({round(float(v), 1) for v in speeds[at(CFG, 3, True), 0]}) > 1


def test_windows_and_persistence_are_aligned() -> None:
    speeds = traffic.generate_speeds(CFG)
    features = traffic.time_features(CFG)
    w = traffic.windows(speeds, features, history=12, horizon=3, steps=range(100, 110))
    assert w.inputs.shape == (10 * CFG.sensors, 12 + 5)
    first = w.inputs[0, :12] * traffic.SPEED_SCALE + traffic.SPEED_CENTER
    np.testing.assert_allclose(first, speeds[89:101, 0], rtol=1e-5)
    assert w.last[0] == speeds[100, 0] and w.targets[0] == speeds[103, 0]
    train, val = traffic.train_val(CFG)
    assert len(val.targets) * 3 < len(train.targets)
    assert np.abs(val.last - val.targets).mean() > 0.5  # persistence is a real baseline


def read_rows(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with open(path, newline="") as handle:
        reader = csv.DictReader(handle)
        return list(reader.fieldnames or []), list(reader)


def check_run(run_dir: Path, epochs: int) -> dict[str, str]:
    columns, rows = read_rows(run_dir / "metrics.csv")
    assert tuple(columns[: len(COLUMNS)]) == COLUMNS
    assert columns[len(COLUMNS) :] == ["persistence_mae", "persistence_rmse"]
    assert [int(r["epoch"]) for r in rows] == list(range(1, epochs + 1))
    last = rows[-1]
    assert 0 < float(last["val_mae"]) < float(last["persistence_mae"])  # beats the baseline
    assert float(last["val_mae"]) < float(last["val_rmse"]) < float(last["persistence_rmse"])
    assert float(last["throughput_samples_per_sec"]) > 0 and float(last["cpu_util_avg"]) > 0
    assert last["gpu_util_avg"] == ""  # no GPU here
    return last


@pytest.mark.slow
def test_workload_beats_persistence_on_two_nodes(tmp_path: Path) -> None:
    run_dir = tmp_path / "traffic"
    result = noderun(
        [*TWO_BY_TWO, "--run-dir", str(run_dir), SCRIPT, "--epochs", "2", "--tensorboard"],
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    last = check_run(run_dir, 2)
    assert "0:0| training on 4 ranks (gloo, cpu): 8 sensors x 28 days" in result.stdout
    summary = [line for line in result.stdout.splitlines() if "persistence baseline" in line]
    assert len(summary) == 1 and "the model beats it" in summary[0]
    assert f"persistence baseline val_mae {float(last['persistence_mae']):.3f} mph" in summary[0]
    assert list((run_dir / "tensorboard").glob("events.out.tfevents.*"))
    verify = cli(["verify", str(run_dir), "--json"])
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert json.loads(verify.stdout)["healthy"] is True


@pytest.mark.slurm
@pytest.mark.slow
def test_workload_as_a_two_node_slurm_job(tmp_path: Path) -> None:
    from tests.slurm.lab import read_json, require_lab

    require_lab()
    run_dir = tmp_path / "traffic-slurm"
    result = noderun(
        [*SUBMIT, "--run-dir", str(run_dir), SCRIPT, "--epochs", "2"],
        timeout=400,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    check_run(run_dir, 2)
    record = read_json(run_dir / "run.json")
    assert record["status"] == "completed" and record["topology"]["world_size"] == 4
    assert len(set(record["hosts"])) == 2
