"""sweep.png: the chosen metric against each parameter (matplotlib, when installed)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from noderun.sweep.table import SweepRow

NO_MATPLOTLIB = "no plot: matplotlib is not installed (pip install 'noderun[plot]')"


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def plot_metric(rows: Sequence[SweepRow], metric: str, path: Path, title: str) -> str:
    """Write the plot; '' when written, else the one-line reason there is none."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return NO_MATPLOTLIB
    measured = [(r, y) for r in rows if (y := _number(r.metrics.get(metric, ""))) is not None]
    if not measured:
        return f"no plot: no point reported {metric!r} in its metrics.csv"
    params = [k for k, _ in measured[0][0].point.values]
    fig, axes = plt.subplots(1, len(params), figsize=(4.5 * len(params), 3.8), squeeze=False)
    for ax, param in zip(axes[0], params, strict=True):
        xs = [r.point.as_dict()[param] for r, _ in measured]
        numeric = all(_number(x) is not None for x in xs)
        order = sorted(dict.fromkeys(xs), key=lambda x: _number(x) if numeric else x)  # type: ignore[arg-type,return-value]
        position = {x: (_number(x) if numeric else i) for i, x in enumerate(order)}
        ax.scatter([position[x] for x in xs], [y for _, y in measured])
        for (r, y), x in zip(measured, xs, strict=True):
            ax.annotate(r.point.name, (position[x], y), fontsize=7)  # type: ignore[arg-type]
        if not numeric:
            ax.set_xticks(range(len(order)), order)
        elif len(order) > 2 and min(position.values()) > 0:  # type: ignore[type-var]
            ax.set_xscale("log")
        ax.set(xlabel=param, ylabel=metric)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return ""
