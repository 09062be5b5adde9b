"""Rank hits into findings: one per cause, the first failure in time first, noise last."""

from __future__ import annotations

import dataclasses
import math
import re
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
    refuted_by: str = ""  # a sign that makes this finding moot (signatures.Signature)
    alone: bool = False  # a cause only when nothing else failed (signatures.Signature)

    def to_dict(self) -> dict[str, Any]:
        return {
            "cause": self.cause,
            "summary": self.summary,
            "fix": self.fix,
            "evidence": dataclasses.asdict(self.evidence),
            "occurrences": self.occurrences,
        }


Key = tuple[int, int, float, int, int, float, int, int]
# a warning-level record ([W socket.cpp:…], glog W…, NCCL WARN): an error-level line of the
# same cause in the same second is the better evidence (c10d retries, then gives up with [E])
_WARN_LEVEL = re.compile(r"(^|[\s\]|:])\[?W(\d{4} | )|\bNCCL WARN\b|\bWARNING\b")


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
        # per cause, and apart for findings a sign can refute: a refuted one must not hide
        # an unrefuted one of the same cause
        self.best: dict[tuple[str, str], tuple[Key, Finding]] = {}
        self.counts: dict[str, int] = {}
        # signs of health: (sign, value) -> first hit and count, in the order first seen
        self.signs: dict[tuple[str, str], tuple[Hit, int]] = {}
        # a launcher reported that the run failed: the signs that would refute each report
        # ("" for none: that report stands whatever else was seen)
        self.failed_unless: set[str] = set()

    def add_file(self, path: Path, hits: Iterable[Hit]) -> None:
        """All hits of one file, in line order; O(causes) memory however many hits."""
        # earliest per cause, tier and refuting sign
        first: dict[tuple[str, Tier, str, bool, bool, bool], tuple[Hit, float | None]] = {}
        last_stamp: float | None = None
        first_stamp: float | None = None
        errors_before = False  # an error-level line came earlier in this file
        for hit in hits:
            signature = hit.signature
            if signature.tier is Tier.SIGN:
                self._add_sign(hit)
                continue
            if signature.cause == "finalization-abort" and errors_before:
                continue  # aborting after an error: the error is the cause
            errors_before = errors_before or signature.tier <= Tier.CONSEQUENCE
            if signature.run_failed or signature.ends_run:
                self.failed_unless.add(signature.refuted_by)
            self.counts[signature.cause] = self.counts.get(signature.cause, 0) + 1
            if hit.time is not None:
                last_stamp = hit.time
                first_stamp = hit.time if first_stamp is None else first_stamp
            level = bool(_WARN_LEVEL.search(hit.text))
            first.setdefault(
                (
                    signature.cause,
                    signature.tier,
                    signature.refuted_by,
                    signature.generic,
                    level,
                    hit.secondary,
                ),
                (hit, last_stamp),
            )
        index = self.file_order.get(path, len(self.file_order))
        for (*_, generic, level, _secondary), (hit, stamp) in first.items():
            when = next(
                (t for t in (stamp, self.time_hints.get(path), first_stamp) if t is not None), None
            )
            key = (
                int(hit.signature.tier),
                int(hit.signature.run_failed),  # a launcher's report after a rank's own words
                math.inf if when is None else math.floor(when),
                int(generic) * 2 + int(level),  # in one second: what says why, at error level
                # then torchelastic's root-cause entry before the other failures it lists
                int(hit.secondary),
                math.inf if when is None else when,
                index,
                hit.line,
            )
            slot = (hit.signature.cause, hit.signature.refuted_by)
            current = self.best.get(slot)
            if current is None or key < current[0]:
                self.best[slot] = (key, _finding(hit, when))

    def _add_sign(self, hit: Hit) -> None:
        match = re.search(hit.signature.pattern, hit.text)
        value = match.group(1) if match and match.groups() and match.group(1) else ""
        key = (hit.signature.cause, value)
        first, count = self.signs.get(key, (hit, 0))
        self.signs[key] = (first, count + 1)

    def run_failed(self, signs: set[str]) -> bool:
        """A launcher reported a failure that none of ``signs`` (seen anywhere) refutes."""
        return any(not refuter or refuter not in signs for refuter in self.failed_unless)

    def findings(self) -> list[Finding]:
        """Every cause and warning seen, best first (verdict.judge decides what they mean)."""
        ranked = [f for _, f in sorted(self.best.values(), key=lambda kv: kv[0])]
        for finding in ranked:
            finding.occurrences = self.counts.get(finding.cause, 1)
        return ranked


def _finding(hit: Hit, when: float | None) -> Finding:
    return Finding(
        cause=hit.signature.cause,
        summary=hit.signature.summary,
        fix=hit.signature.fix,
        evidence=Evidence(str(hit.path), hit.line, hit.text),
        tier=hit.signature.tier,
        time=when,
        refuted_by=hit.signature.refuted_by,
        alone=hit.signature.alone,
    )
