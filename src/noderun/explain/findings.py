"""Rank hits into findings: one per cause, the first failure in time first, noise last."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from noderun.explain.scanner import Hit
from noderun.explain.signatures import Tier


@dataclasses.dataclass(frozen=True)
class Evidence:
    file: str
    line: int
    text: str


@dataclasses.dataclass
class Finding:
    """A cause, its best evidence line, and how often the cause was seen."""

    cause: str
    summary: str
    fix: str
    evidence: Evidence
    tier: Tier
    time: float | None
    occurrences: int = 1

    def to_dict(self) -> dict[str, Any]:
        return {
            "cause": self.cause,
            "summary": self.summary,
            "fix": self.fix,
            "evidence": dataclasses.asdict(self.evidence),
            "occurrences": self.occurrences,
        }


Key = tuple[int, float, int, int]


class Ranker:
    """Keeps the best hit per cause while files stream in: memory is O(causes), not O(lines).

    Order: tier (root causes, then consequences, weak hints, generic words), then time, then
    input order (file, line). A hit's time is its log record's timestamp; a line without one
    takes the time of the nearest stamped hit of its file (line order is time order within a
    file), else the file's hint (the time a rank recorded its exception), else "unknown", which
    sorts after every known time.
    """

    def __init__(self, file_order: Mapping[Path, int], time_hints: Mapping[Path, float]) -> None:
        self.file_order = dict(file_order)
        self.time_hints = dict(time_hints)
        self.best: dict[str, tuple[Key, Finding]] = {}
        self.counts: dict[str, int] = {}

    def add_file(self, path: Path, hits: Iterable[Hit]) -> None:
        """All hits of one file, in line order; O(causes) memory however many hits."""
        first: dict[tuple[str, Tier], tuple[Hit, float | None]] = {}  # earliest per cause+tier
        last_stamp: float | None = None
        first_stamp: float | None = None
        for hit in hits:
            self.counts[hit.signature.cause] = self.counts.get(hit.signature.cause, 0) + 1
            if hit.time is not None:
                last_stamp = hit.time
                first_stamp = hit.time if first_stamp is None else first_stamp
            first.setdefault((hit.signature.cause, hit.signature.tier), (hit, last_stamp))
        index = self.file_order.get(path, len(self.file_order))
        for hit, stamp in first.values():
            when = next(
                (t for t in (stamp, self.time_hints.get(path), first_stamp) if t is not None), None
            )
            key = (int(hit.signature.tier), math.inf if when is None else when, index, hit.line)
            current = self.best.get(hit.signature.cause)
            if current is None or key < current[0]:
                self.best[hit.signature.cause] = (key, _finding(hit, when))

    def findings(self) -> list[Finding]:
        ranked = [f for _, f in sorted(self.best.values(), key=lambda kv: kv[0])]
        for finding in ranked:
            finding.occurrences = self.counts.get(finding.cause, 1)
        if any(f.tier is not Tier.LAST_RESORT for f in ranked):
            ranked = [f for f in ranked if f.tier is not Tier.LAST_RESORT]
        return ranked


def _finding(hit: Hit, when: float | None) -> Finding:
    return Finding(
        cause=hit.signature.cause,
        summary=hit.signature.summary,
        fix=hit.signature.fix,
        evidence=Evidence(str(hit.path), hit.line, hit.text),
        tier=hit.signature.tier,
        time=when,
    )
