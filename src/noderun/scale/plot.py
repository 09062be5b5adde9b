"""scaling.png: speedup and efficiency against ranks, with the ideal line (matplotlib)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from noderun.scale.analysis import ScalingRow


def plot_scaling(rows: Sequence[ScalingRow], path: Path, title: str) -> bool:
    """Write the plot; False (nothing written) when matplotlib is missing or nothing succeeded."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    ok = sorted((r for r in rows if r.speedup is not None), key=lambda r: r.point.ranks)
    if not ok:
        return False
    ranks = [r.point.ranks for r in ok]
    base = ranks[0]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    left.plot(ranks, [r / base for r in ranks], "--", color="grey", label="ideal")
    left.plot(ranks, [r.speedup for r in ok], "o-", label="measured")
    left.set(xlabel="ranks", ylabel="speedup", title="speedup")
    left.legend()
    right.axhline(1.0, linestyle="--", color="grey", label="ideal")
    right.plot(ranks, [r.efficiency for r in ok], "o-", color="tab:orange", label="measured")
    right.set(xlabel="ranks", ylabel="efficiency", title="efficiency", ylim=(0, 1.2))
    right.legend()
    for r in ok:
        left.annotate(r.point.name, (r.point.ranks, r.speedup or 0), fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True
