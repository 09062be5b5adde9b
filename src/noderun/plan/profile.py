"""ProfileSpec: which steps of which ranks to profile (``--profile``, ``NODERUN_PROFILE``). Pure.

The text is comma-separated ``key=value`` items; a bare number after ``ranks=`` is one more
rank, so ``steps=5:10,ranks=0,1`` reads as written. ``on`` (or ``1``) takes every default.

>>> parse_profile("steps=5:10,ranks=0,1")
ProfileSpec(start=5, stop=10, ranks=(0, 1), trace=True)
"""

from __future__ import annotations

import dataclasses

PROFILE_ENV = "NODERUN_PROFILE"
PROFILE_DIR = "profile"  # under the run directory
PHASES = ("data", "forward", "backward", "comm", "optimizer", "checkpoint", "other")
_ON, _OFF = ("on", "1", "true", "yes"), ("", "off", "0", "false", "no")


@dataclasses.dataclass(frozen=True)
class ProfileSpec:
    """Steps ``start`` to ``stop`` (both included, counted from 1) on ``ranks`` (None: all);
    ``trace`` also runs torch.profiler over those steps."""

    start: int = 5
    stop: int = 10
    ranks: tuple[int, ...] | None = (0,)
    trace: bool = True

    def selects(self, rank: int) -> bool:
        return self.ranks is None or rank in self.ranks

    def covers(self, step: int) -> bool:
        return self.start <= step <= self.stop

    def text(self) -> str:
        """The spec as ``NODERUN_PROFILE`` text; ``parse_profile(s.text()) == s``."""
        ranks = "all" if self.ranks is None else ",".join(map(str, self.ranks))
        return f"steps={self.start}:{self.stop},ranks={ranks},trace={int(self.trace)}"


def parse_profile(text: str) -> ProfileSpec | None:
    """The spec ``text`` asks for, None for ``off``; ValueError saying what is wrong."""
    text = text.strip()
    if text.lower() in _OFF:
        return None
    if text.lower() in _ON:
        return ProfileSpec()
    fields: dict[str, object] = {}
    key = ""
    ranks: list[int] = []
    for item in (part.strip() for part in text.split(",")):
        name, sep, raw = item.partition("=")
        if sep:
            key = name.strip()
        elif key == "ranks":
            raw = item
        else:
            raise ValueError(f"{item!r} is not key=value (steps=A:B, ranks=R,R|all, trace=0|1)")
        if key == "steps":
            fields["start"], fields["stop"] = _steps(raw)
        elif key == "ranks" and raw.strip() == "all":
            fields["ranks"] = None
        elif key == "ranks":
            ranks.append(_number(raw, "rank", 0))
            fields["ranks"] = tuple(sorted(set(ranks)))
        elif key == "trace" and raw.strip() in ("0", "1"):
            fields["trace"] = raw.strip() == "1"
        else:
            raise ValueError(f"{item!r}: keys are steps=A:B, ranks=R,R|all, trace=0|1")
    return ProfileSpec(**fields)  # type: ignore[arg-type]


def _steps(raw: str) -> tuple[int, int]:
    first, sep, last = raw.partition(":")
    start = _number(first, "first step", 1)
    stop = _number(last, "last step", 1) if sep else start
    if stop < start:
        raise ValueError(f"steps={raw}: the last step comes before the first")
    return start, stop


def _number(raw: str, what: str, least: int) -> int:
    try:
        value = int(raw.strip())
    except ValueError:
        raise ValueError(f"{what} {raw.strip()!r} is not a whole number") from None
    if value < least:
        raise ValueError(f"{what} {value} must be at least {least}")
    return value


def rank_file(rank: int) -> str:
    """The per-rank breakdown a profiled rank writes under ``RUN_DIR/profile/``."""
    return f"rank{rank}.json"


def trace_file(rank: int) -> str:
    return f"rank{rank}.trace.json"
