"""The per-rank step-time table from ``RUN_DIR/profile/rank<R>.json`` (``--profile``).

``write_breakdown(run_dir)`` writes ``profile/breakdown.md``; ``noderun run`` calls it when the
ranks are done, ``noderun verify`` prints it.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

from noderun import atomic
from noderun.plan.profile import PHASES, PROFILE_DIR

BREAKDOWN = "breakdown.md"
_RANK_FILE = re.compile(r"rank(\d+)\.json$")


@dataclasses.dataclass(frozen=True)
class RankProfile:
    """One rank's window: mean seconds per step, per phase, and what lay between steps."""

    rank: int
    host: str
    steps: tuple[int, ...]
    step_seconds: float  # mean over the profiled steps
    phases: dict[str, float]  # mean seconds per step
    between_seconds: float
    between: dict[str, float]
    trace: str | None
    ended_before_window: bool

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> RankProfile:
        steps = record.get("steps") or []
        count = max(len(steps), 1)
        phases = {
            name: sum(float(s["phases"].get(name, 0.0)) for s in steps) / count for name in PHASES
        }
        between = record.get("between_steps") or {}
        return cls(
            rank=int(record["rank"]),
            host=str(record.get("host", "")),
            steps=tuple(int(s["step"]) for s in steps),
            step_seconds=sum(float(s["seconds"]) for s in steps) / count,
            phases=phases,
            between_seconds=float(between.get("seconds", 0.0)),
            between={k: float(v) for k, v in (between.get("phases") or {}).items()},
            trace=record.get("trace"),
            ended_before_window=bool(record.get("ended_before_window")),
        )


def load_profiles(run_dir: Path) -> list[RankProfile]:
    """Every rank's profile in rank order; [] when the run was not profiled."""
    folder = run_dir / PROFILE_DIR
    if not folder.is_dir():
        return []
    found = []
    for path in folder.iterdir():
        if _RANK_FILE.fullmatch(path.name):
            try:
                found.append(RankProfile.from_record(json.loads(path.read_text())))
            except (OSError, ValueError, KeyError, TypeError):
                continue  # a rank that died while writing: the others still count
    return sorted(found, key=lambda p: p.rank)


def _span(steps: tuple[int, ...]) -> str:
    if not steps:
        return "none"
    return f"{steps[0]}-{steps[-1]}" if len(steps) > 1 else str(steps[0])


def render(profiles: list[RankProfile]) -> str:
    """Markdown: one row per rank, ms per step and share of the step for every phase."""
    header = ["rank", "host", "steps", "step ms", *(f"{p} ms (%)" for p in PHASES)]
    lines = [
        "# Where the step time goes",
        "",
        "Mean per profiled step; every instant of a step is charged to one phase, so the phases "
        "add up to the step. comm is the all_reduce wait left after the backward (the part "
        "overlapped with it counts as backward) plus `ctx.all_reduce_*`.",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
    ]
    for prof in profiles:
        cells = [str(prof.rank), prof.host, _span(prof.steps), f"{prof.step_seconds * 1e3:.2f}"]
        for name in PHASES:
            value = prof.phases[name]
            share = 100 * value / prof.step_seconds if prof.step_seconds > 0 else 0.0
            cells.append(f"{value * 1e3:.2f} ({share:.0f}%)")
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    for prof in profiles:
        if prof.between_seconds > 0:
            parts = ", ".join(
                f"{name} {value * 1e3:.1f} ms"
                for name, value in prof.between.items()
                if value >= 0.0005
            )
            lines.append(
                f"- rank {prof.rank}, between steps inside the window (evaluation, epoch-end "
                f"checkpoint): {prof.between_seconds * 1e3:.1f} ms ({parts})"
            )
        if prof.ended_before_window:
            lines.append(f"- rank {prof.rank}: the run ended before the window's last step")
        if prof.trace:
            lines.append(
                f"- rank {prof.rank}: torch.profiler trace `{PROFILE_DIR}/{prof.trace}` "
                "(chrome://tracing or https://ui.perfetto.dev), "
                f"top operators `{PROFILE_DIR}/rank{prof.rank}.ops.txt`"
            )
    return "\n".join(lines).rstrip() + "\n"


def write_breakdown(run_dir: Path) -> Path | None:
    """``profile/breakdown.md`` from the ranks' files; None when no rank left a profile."""
    profiles = load_profiles(run_dir)
    if not profiles:
        return None
    path = run_dir / PROFILE_DIR / BREAKDOWN
    atomic.write_text(path, render(profiles), durable=False)
    return path
