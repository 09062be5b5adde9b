"""``noderun explain``: the root cause of a failed run, its evidence line, and the fix; or
"no failure found" and what the logs show."""

from __future__ import annotations

from collections.abc import Sequence

from noderun.errors import UsageError
from noderun.explain.findings import Evidence, Finding, Ranker
from noderun.explain.scanner import Scanner
from noderun.explain.signatures import CAUSES, SIGNATURES, Signature, Tier
from noderun.explain.sources import Sources, collect
from noderun.explain.verdict import Seen, Verdict, judge

__all__ = [
    "CAUSES",
    "SIGNATURES",
    "Evidence",
    "Finding",
    "Scanner",
    "Seen",
    "Signature",
    "Tier",
    "Verdict",
    "examine",
    "explain",
]


def examine(targets: Sequence[str], scanner: Scanner | None = None) -> Verdict:
    """The verdict over all ``targets`` (files, directories, run directories, job ids)."""
    return examine_sources(collect(targets), scanner or Scanner())


def explain(targets: Sequence[str], scanner: Scanner | None = None) -> list[Finding]:
    """The failures found in ``targets``, root cause first; [] when none."""
    return examine(targets, scanner).failures


def examine_sources(sources: Sources, scanner: Scanner) -> Verdict:
    ranker = Ranker({p: i for i, p in enumerate(sources.files)}, sources.time_hints)
    for path in sources.files:
        try:
            ranker.add_file(path, scanner.scan(path))
        except OSError as err:
            raise UsageError(
                f"cannot read {path}: {err.strerror}", "check its permissions"
            ) from None
        except (UnicodeError, ValueError) as err:  # a log that is not text after all
            raise UsageError(f"cannot read {path} as text: {err}", "pass a text log") from None
    return judge(ranker, sources, scanner.last_lines)
