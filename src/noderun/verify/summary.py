"""``EXECUTION_SUMMARY.md`` (``noderun verify RUN --summary``): what ran where, the checks,
final metrics, throughput, the losses per epoch (``losses.png``), SLURM accounting, the profile.

Everything is read back from the run directory (run.json, runtime.json, metrics.csv or a
Lightning CSVLogger's, sacct_summary.txt, profile/); what a run did not leave is named, with
why. Both files are written atomically.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from noderun import atomic
from noderun.backends.slurm import SACCT_SUMMARY
from noderun.verify.evidence import RunEvidence, load_evidence, number
from noderun.verify.model import Report
from noderun.verify.profile_report import load_profiles, render

SUMMARY = "EXECUTION_SUMMARY.md"
LOSS_PLOT = "losses.png"
THROUGHPUT_COLUMNS = ("throughput_samples_per_sec", "tokens_per_sec")


def write_summary(run_dir: Path, report: Report) -> Path:
    """Write ``EXECUTION_SUMMARY.md`` (and ``losses.png`` when there are losses to plot)."""
    ev = load_evidence(run_dir)
    missing: list[str] = []
    plot = _plot_losses(ev, run_dir / LOSS_PLOT, missing)
    sections = [
        _header(ev, report),
        _where(ev, missing),
        _checks(report),
        _metrics(ev, missing),
        _throughput(ev, missing),
        _loss_section(plot),
        _slurm(ev, missing),
        _profile(run_dir),
        _missing(missing),
    ]
    path = run_dir / SUMMARY
    atomic.write_text(path, "\n".join(s for s in sections if s).rstrip() + "\n", durable=False)
    return path


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}" if math.isfinite(value) else str(value)
    if isinstance(value, list | tuple):
        return " ".join(str(v) for v in value)
    return "" if value is None else str(value)


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_fmt(c).replace("|", "\\|") for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _header(ev: RunEvidence, report: Report) -> str:
    run = ev.run_record
    verdict = "HEALTHY" if report.healthy else "NOT HEALTHY"
    return (
        f"# Execution summary: {ev.run_dir.name}\n\n"
        f"- run directory: `{ev.run_dir}`\n"
        f"- status: {run.get('status', 'unknown (no run.json)')}, exit code "
        f"{run.get('exit_code', '?')}; verify: **{verdict}**\n"
        f"- started {run.get('start_time', '?')}, ended {run.get('end_time', '?')}, "
        f"{_fmt(run.get('duration_sec', '?'))} s\n"
    )


def _where(ev: RunEvidence, missing: list[str]) -> str:
    run, runtime = ev.run_record, ev.runtime_record
    topo = run.get("topology") or {}
    seen = runtime.get("topology") or {}
    script = " ".join([run.get("script", "?"), *run.get("script_args", [])])
    launcher = seen.get("launcher")
    mode = f" ({run['mode']} mode)" if run.get("mode") else ""
    if launcher is None:
        missing.append(
            "the launcher as the ranks saw it, backend and every rank's host: no runtime.json "
            "(the script does not call noderun.init())"
        )
    rows = [
        ("script", f"`{script}`"),
        ("command", f"`{' '.join(run.get('command', []))}`"),
        ("backend", run.get("backend", "?") + mode),
        ("job id", run.get("job_id") or "none (not SLURM)"),
        ("launcher seen by the ranks", launcher or "unknown"),
        (
            "topology",
            f"{topo.get('nnodes', '?')} node(s) x {topo.get('nproc_per_node', '?')} = "
            f"{runtime.get('world_size', topo.get('world_size', '?'))} ranks",
        ),
        ("process group", f"{runtime.get('backend', '?')} on {runtime.get('device', '?')}"),
        ("master", f"{topo.get('master_addr', '?')}:{topo.get('master_port', '?')}"),
        ("versions", ", ".join(f"{k} {v}" for k, v in (run.get("versions") or {}).items())),
    ]
    text = "## What ran where\n\n" + _table(("", ""), rows)
    hosts = runtime.get("rank_hosts") or []
    per_node = int(topo.get("nproc_per_node") or 0)
    if hosts:
        ranks = [(r, r // per_node if per_node else "?", h) for r, h in enumerate(hosts)]
        text += "\n" + _table(("rank", "node", "host"), ranks)
    elif run.get("hosts"):
        text += "\n" + _table(("node", "host"), list(enumerate(run["hosts"])))
    codes = run.get("node_exit_codes") or {}
    if codes:
        text += "\nexit code per node: " + ", ".join(f"{k}: {v}" for k, v in codes.items()) + "\n"
    return text


def _checks(report: Report) -> str:
    rows = [(c.name, c.status.value, c.detail) for c in report.checks]
    return "## Checks (noderun verify)\n\n" + _table(("check", "status", "detail"), rows)


def _last_values(ev: RunEvidence) -> dict[str, float]:
    """Each column's last non-empty value (a Lightning CSVLogger fills rows sparsely)."""
    last: dict[str, float] = {}
    for row in ev.rows:
        for column, text in row.items():
            value = number(text)
            if value is not None and column:
                last[column] = value
    return last


def _metrics(ev: RunEvidence, missing: list[str]) -> str:
    if not ev.rows:
        missing.append(f"final metrics and the loss plot: {ev.metrics.error or 'no rows'}")
        return ""
    last = _last_values(ev)
    text = f"## Final metrics\n\nfrom `{ev.metrics.path.relative_to(ev.run_dir)}`, "
    text += f"{len(ev.rows)} row(s)\n\n"
    return text + _table(("metric", "final value"), list(last.items()))


def _throughput(ev: RunEvidence, missing: list[str]) -> str:
    column = next((c for c in THROUGHPUT_COLUMNS if c in ev.metrics_header), None)
    values = _column(ev, column) if column else []
    duration = ev.run_record.get("duration_sec")
    lines = ["## Throughput", ""]
    if len(values) > 1:
        steady = values[1:]  # the first row pays for start-up
        lines.append(
            f"- {column}: mean {sum(steady) / len(steady):.4g} over rows 2-{len(values)} "
            f"(first {values[0]:.4g}, last {values[-1]:.4g})"
        )
    elif values:
        lines.append(f"- {column}: {values[0]:.4g} (one row)")
    else:
        missing.append("throughput: metrics have no throughput_samples_per_sec/tokens_per_sec")
    data, compute = _column_sum(ev, "data_load_time_sec"), _column_sum(ev, "compute_time_sec")
    if data is not None and compute is not None and data + compute > 0:
        lines.append(
            f"- data loading {data:.3g} s, compute {compute:.3g} s "
            f"({100 * data / (data + compute):.1f}% of epoch time waiting for data)"
        )
    epoch_time = _column_sum(ev, "epoch_time_sec")
    if epoch_time is not None:
        lines.append(f"- epochs took {epoch_time:.4g} s in all")
    if duration is not None:
        lines.append(f"- wall time of the run (launch to end): {_fmt(duration)} s")
    return "\n".join(lines) + "\n" if len(lines) > 2 else ""


def _column(ev: RunEvidence, column: str) -> list[float]:
    return [v for r in ev.rows if (v := number(r.get(column))) is not None]


def _column_sum(ev: RunEvidence, column: str) -> float | None:
    values = _column(ev, column) if column in ev.metrics_header else []
    return sum(values) if values else None


def loss_series(ev: RunEvidence) -> tuple[str, dict[str, list[tuple[float, float]]]]:
    """The index column (epoch or step) and each loss column's last value per index."""
    index = next((c for c in ("epoch", "step") if c in ev.metrics_header), "")
    series: dict[str, dict[float, float]] = {}
    losses = [c for c in ev.metrics_header if c == "loss" or c.endswith("_loss")]
    for row in ev.rows:
        at = number(row.get(index)) if index else None
        if at is None or math.isnan(at):
            continue
        for column in losses:
            value = number(row.get(column))
            if value is not None and math.isfinite(value):
                series.setdefault(column, {})[at] = value
    return index, {c: sorted(points.items()) for c, points in series.items()}


def _plot_losses(ev: RunEvidence, path: Path, missing: list[str]) -> Path | None:
    index, series = loss_series(ev)
    if not series:
        if ev.rows:
            missing.append("loss plot: metrics have no epoch/step column with *_loss values")
        return None
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        missing.append("loss plot: matplotlib is not installed (pip install 'noderun[scale]')")
        return None
    fig, axes = plt.subplots(figsize=(6, 4))
    for column, points in series.items():
        axes.plot([p[0] for p in points], [p[1] for p in points], "o-", label=column)
    axes.set(xlabel=index, ylabel="loss", title=f"losses per {index}: {ev.run_dir.name}")
    axes.legend()
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    plt.close(fig)
    atomic.write_bytes(path, buffer.getvalue(), durable=False)
    return path


def _loss_section(plot: Path | None) -> str:
    if plot is None:
        return ""
    return f"## Losses\n\n![losses per epoch]({plot.name})\n"


def _slurm(ev: RunEvidence, missing: list[str]) -> str:
    path = ev.run_dir / SACCT_SUMMARY
    if not path.is_file():
        if ev.run_record.get("backend") == "slurm" or ev.run_record.get("job_id"):
            missing.append(f"SLURM accounting: no {SACCT_SUMMARY} (sacct was not reachable)")
        return ""
    return f"## SLURM accounting (`{SACCT_SUMMARY}`)\n\n```\n{path.read_text().rstrip()}\n```\n"


def _profile(run_dir: Path) -> str:
    profiles = load_profiles(run_dir)
    if not profiles:
        return ""
    return "## Profile\n\n" + render(profiles).replace("# Where", "### Where", 1)


def _missing(missing: list[str]) -> str:
    if not missing:
        return ""
    return "## Not in this run\n\n" + "\n".join(f"- {m}" for m in missing) + "\n"
