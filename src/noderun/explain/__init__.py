"""``noderun explain``: the root cause of a failed run, its evidence line, and the fix."""

from __future__ import annotations

from collections.abc import Sequence

from noderun.explain.findings import Evidence, Finding, Ranker
from noderun.explain.scanner import Scanner
from noderun.explain.signatures import CAUSES, SIGNATURES, Signature, Tier
from noderun.explain.sources import Sources, collect

__all__ = ["CAUSES", "SIGNATURES", "Finding", "Scanner", "Signature", "Tier", "explain"]


def explain(targets: Sequence[str], scanner: Scanner | None = None) -> list[Finding]:
    """Findings over all ``targets`` (files, directories, run directories, job ids), ranked."""
    sources = collect(targets)
    return explain_sources(sources, scanner or Scanner())


def explain_sources(sources: Sources, scanner: Scanner) -> list[Finding]:
    ranker = Ranker({p: i for i, p in enumerate(sources.files)}, sources.time_hints)
    for path in sources.files:
        try:
            ranker.add_file(path, scanner.scan(path))
        except OSError as err:
            from noderun.errors import UsageError

            raise UsageError(
                f"cannot read {path}: {err.strerror}", "check its permissions"
            ) from None
    findings = ranker.findings()
    if not findings and sources.failures:
        where, text = sources.failures[0]
        unknown = CAUSES["unknown"]
        findings = [
            Finding(
                cause="unknown",
                summary=f"{unknown}; the logs hold no known error line",
                fix="read the logs of the failing rank; add its message to "
                "noderun/explain/signatures.py",
                evidence=Evidence(where, 0, text),
                tier=Tier.LAST_RESORT,
                time=None,
            )
        ]
    return findings
