"""The sweep's result, pure: one row per point, ``sweep.csv`` and the table printed at the end."""

from __future__ import annotations

import csv
import dataclasses
import io
from collections.abc import Mapping, Sequence

from noderun.sweep.grid import Point

SHOWN_METRICS = 3  # metric columns in the printed table (sweep.csv has them all)
_CAUSE_WIDTH = 100


@dataclasses.dataclass(frozen=True)
class SweepRow:
    point: Point
    status: str  # run.json's status, "timed out" or "not run"
    verdict: str  # verify: "healthy", "unhealthy", "" (nothing to verify)
    metrics: Mapping[str, str]  # the last row of metrics.csv
    finding: str  # explain's root cause of a failed or unhealthy point
    run_dir: str
    job_id: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "completed" and self.verdict == "healthy"


def row_json(row: SweepRow) -> dict[str, object]:
    """One point for ``sweep --json``: its name and values, then what sweep.csv says of it."""
    return {
        "point": row.point.name,
        "params": row.point.as_dict(),
        "status": row.status,
        "verify": row.verdict,
        "metrics": dict(row.metrics),
        "cause": row.finding,
        "run_dir": row.run_dir,
        "job_id": row.job_id or None,
    }


def metric_columns(rows: Sequence[SweepRow], first: str | None = None) -> list[str]:
    """Every metric column any point reported, in order of appearance; ``first`` first."""
    seen = dict.fromkeys(k for r in rows for k in r.metrics)
    columns = list(seen)
    if first and first in seen:
        columns.remove(first)
        columns.insert(0, first)
    return columns


def rows_csv(rows: Sequence[SweepRow], metric: str | None = None) -> str:
    """point, one column per param, status, verify, the metrics, cause, run_dir, job_id."""
    params = list(dict.fromkeys(k for r in rows for k, _ in r.point.values))
    metrics = metric_columns(rows, metric)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["point", *params, "status", "verify", *metrics, "cause", "run_dir", "job_id"])
    for r in rows:
        values = r.point.as_dict()
        writer.writerow(
            [r.point.name, *(values.get(p, "") for p in params), r.status, r.verdict,
             *(r.metrics.get(m, "") for m in metrics), r.finding, r.run_dir, r.job_id]
        )  # fmt: skip
    return buffer.getvalue()


def rows_text(rows: Sequence[SweepRow], metric: str | None = None) -> str:
    """The table printed at the end: aligned columns, a failure's cause cut to one line."""
    metrics = metric_columns(rows, metric)[:SHOWN_METRICS]
    header = ["point", "status", "verify", *metrics, "cause"]
    body = [
        [r.point.name, r.status, r.verdict or "-", *(r.metrics.get(m, "") for m in metrics),
         _one_line(r.finding)]
        for r in rows
    ]  # fmt: skip
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header) - 1)]
    lines = []
    for line in [header, *body]:
        cells = [cell.ljust(w) for cell, w in zip(line, widths, strict=False)]
        lines.append("  ".join([*cells, line[-1]]).rstrip())
    return "\n".join(lines) + "\n"


def _one_line(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _CAUSE_WIDTH else text[: _CAUSE_WIDTH - 1] + "…"
