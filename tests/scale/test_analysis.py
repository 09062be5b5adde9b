"""Scaling arithmetic: points, speedup and efficiency that add up, for both scalings."""

from __future__ import annotations

import csv
import io

import pytest

from noderun.scale.analysis import (
    Point,
    PointResult,
    plan_points,
    rows_csv,
    rows_markdown,
    scaling_rows,
)


def metrics(epoch_time: float, throughput: float | None, data: float, compute: float) -> tuple:
    warmup = {"epoch_time_sec": "99", "throughput_samples_per_sec": "1", "data_load_time_sec":
              "9", "compute_time_sec": "9"}  # fmt: skip
    row = {
        "epoch_time_sec": str(epoch_time),
        "throughput_samples_per_sec": "" if throughput is None else str(throughput),
        "data_load_time_sec": str(data),
        "compute_time_sec": str(compute),
    }
    return (warmup, row, row)


def test_points_every_combination_smallest_world_first() -> None:
    points = plan_points([2, 1], [2, 1, 2])
    assert [p.name for p in points] == ["1x1", "1x2", "2x1", "2x2"]
    assert [p.ranks for p in points] == [1, 2, 2, 4]


def test_strong_scaling_from_throughput_skips_the_warmup_epoch() -> None:
    results = [
        PointResult(Point(1, 1), True, "a", 10.0, metrics(1.0, 1000.0, 0.1, 0.9)),
        PointResult(Point(2, 1), True, "b", 7.0, metrics(0.6, 1600.0, 0.1, 0.5)),
        PointResult(Point(2, 2), True, "c", 6.0, metrics(0.5, 2000.0, 0.2, 0.3)),
    ]
    rows = scaling_rows(results, "strong")
    assert [r.speedup for r in rows] == pytest.approx([1.0, 1.6, 2.0])
    assert [r.efficiency for r in rows] == pytest.approx([1.0, 0.8, 0.5])
    assert all(r.efficiency == pytest.approx(r.speedup / (r.point.ranks / 1)) for r in rows)
    assert rows[2].data_fraction == pytest.approx(0.4)
    assert {r.basis for r in rows} == {"throughput"}


def test_wall_time_when_the_script_reports_no_throughput() -> None:
    results = [
        PointResult(Point(1, 1), True, "a", 10.0),
        PointResult(Point(2, 1), True, "b", 8.0),
    ]
    strong = scaling_rows(results, "strong")
    weak = scaling_rows(results, "weak")
    assert [r.speedup for r in strong] == pytest.approx([1.0, 1.25])
    assert [r.efficiency for r in strong] == pytest.approx([1.0, 0.625])
    # weak: twice the work in 8 s instead of 10 s
    assert [r.speedup for r in weak] == pytest.approx([1.0, 2.5])
    assert [r.efficiency for r in weak] == pytest.approx([1.0, 1.25])
    assert {r.basis for r in strong} == {"wall"}


def test_a_failed_point_has_no_figures_and_the_base_is_the_smallest_success() -> None:
    results = [
        PointResult(Point(1, 1), False, "a", None, finding="rank-crashed: rank 0 …"),
        PointResult(Point(1, 2), True, "b", 10.0),
        PointResult(Point(2, 2), True, "c", 6.0),
    ]
    rows = scaling_rows(results, "strong")
    assert (rows[0].status, rows[0].speedup, rows[0].efficiency) == ("failed", None, None)
    assert rows[1].speedup == pytest.approx(1.0)
    assert rows[2].efficiency == pytest.approx((10 / 6) / 2)


def test_csv_and_markdown_carry_the_figures_and_the_core_count() -> None:
    results = [
        PointResult(Point(1, 1), True, "a", 10.0, metrics(1.0, 1000.0, 0.1, 0.9)),
        PointResult(Point(2, 1), False, "b", None, finding="port-in-use: …"),
    ]
    rows = scaling_rows(results, "strong")
    table = list(csv.DictReader(io.StringIO(rows_csv(rows))))
    assert table[0]["speedup"] == "1.000" and table[0]["throughput_samples_per_sec"] == "1000.0"
    assert table[1]["status"] == "failed" and table[1]["finding"] == "port-in-use: …"
    text = rows_markdown(rows, "strong", 2)
    assert "Machine: 2 CPU cores" in text
    assert "| 1x1 | 1 | ok | 10.0 | 1000 | 1.00 | 1.00 | 10 |" in text
    assert "| 2x1 | 2 | failed |" in text and "port-in-use" in text


def test_unknown_scaling_is_refused() -> None:
    with pytest.raises(ValueError, match="strong"):
        scaling_rows([], "sideways")
