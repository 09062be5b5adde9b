"""Rank hits into findings: one per cause, the first failure in time first, noise last."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from noderun.explain.scanner import Hit
from noderun.explain.signatures import Signature, Tier


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
    files: set[str] = dataclasses.field(default_factory=set)

    def to_dict(self) -> dict[str, Any]:
        return {
            "cause": self.cause,
            "summary": self.summary,
            "fix": self.fix,
            "evidence": dataclasses.asdict(self.evidence),
            "occurrences": self.occurrences,
        }


class Ranker:
    """Keeps the best hit per cause while hits stream in: memory is O(causes), not O(lines).

    Order: tier (root causes, then consequences, weak hints, generic words), then time
    (the log's timestamp, or a hint such as the time a rank recorded its exception), then
    input order (file, line). Within one file line order is time order.
    """

    def __init__(self, file_order: Mapping[Path, int], time_hints: Mapping[Path, float]) -> None:
        self.file_order = dict(file_order)
        self.time_hints = dict(time_hints)
        self.best: dict[str, tuple[tuple[float, float, int, int], Finding]] = {}

    def _key(self, hit: Hit) -> tuple[float, float, int, int]:
        when = hit.time if hit.time is not None else self.time_hints.get(hit.path)
        return (
            float(hit.signature.tier),
            when if when is not None else math.inf,
            self.file_order.get(hit.path, len(self.file_order)),
            hit.line,
        )

    def add(self, hit: Hit) -> None:
        key = self._key(hit)
        current = self.best.get(hit.signature.cause)
        if current is None or key < current[0]:
            finding = _finding(hit.signature, hit, key[1])
            if current is not None:
                finding.occurrences = current[1].occurrences + 1
                finding.files = current[1].files
            finding.files.add(str(hit.path))
            self.best[hit.signature.cause] = (key, finding)
        else:
            current[1].occurrences += 1
            current[1].files.add(str(hit.path))

    def add_all(self, hits: Iterable[Hit]) -> None:
        for hit in hits:
            self.add(hit)

    def findings(self) -> list[Finding]:
        ranked = [f for _, f in sorted(self.best.values(), key=lambda kv: kv[0])]
        if any(f.tier is not Tier.LAST_RESORT for f in ranked):
            ranked = [f for f in ranked if f.tier is not Tier.LAST_RESORT]
        return ranked


def _finding(signature: Signature, hit: Hit, when: float) -> Finding:
    return Finding(
        cause=signature.cause,
        summary=signature.summary,
        fix=signature.fix,
        evidence=Evidence(str(hit.path), hit.line, hit.text),
        tier=signature.tier,
        time=None if math.isinf(when) else when,
    )
