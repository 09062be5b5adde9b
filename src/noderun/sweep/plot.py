"""sweep.png: the chosen metric against each parameter (matplotlib, when installed)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from noderun.sweep.table import SweepRow

NO_MATPLOTLIB = "no plot: matplotlib is not installed (pip install 'noderun[scale]')"


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
        numbers = [_number(x) for x in xs]
        numeric = all(n is not None for n in numbers)
        if numeric:
            position = {x: float(x) for x in xs}
        else:
            order = sorted(dict.fromkeys(xs))
            position = {x: float(i) for i, x in enumerate(order)}
            ax.set_xticks(range(len(order)), order)
        ax.scatter([position[x] for x in xs], [y for _, y in measured])
        for (r, y), x in zip(measured, xs, strict=True):
            ax.annotate(r.point.name, (position[x], y), fontsize=7)
        if numeric and len(set(xs)) > 2 and min(position.values()) > 0:
            ax.set_xscale("log")  # learning rates and batch sizes span decades
        ax.set(xlabel=param, ylabel=metric)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return ""
