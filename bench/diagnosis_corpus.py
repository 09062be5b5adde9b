"""How well ``noderun explain`` (and ``noderun check``) diagnose real inputs nobody here wrote.

Every case of ``tests/corpus/explain/<case_id>/`` (``case.toml`` + ``log.txt`` or ``*.log``) is
explained in-process; the figures are printed for the tuning part and the held-out part apart.
The split is fixed by rule and never changes: a case is held out when
``sha256(repo.lower())[0] % 10 < 3``. Signatures are tuned on the tuning part only; of the
held-out part only aggregate figures are printed (how many misses, never which: ``--json``
still holds them for the regression test's message, so do not read it for the held-out part).

    .venv/bin/python bench/diagnosis_corpus.py [--corpus DIR] [--json] [--record]

``--record`` writes the figures to ``tests/corpus/explain/recorded.json``, which the suite's
regression test (tests/explain/test_corpus.py) holds them to. Ends with the headline line.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import importlib.util
import json
import sys
import tomllib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "corpus" / "explain"
RECORDED = CORPUS / "recorded.json"
TARGETS = {"cause": 0.95, "evidence": 0.90}
LOG_SUFFIXES = (".log", ".txt", ".out", ".err")
PARTS = ("tuning", "held_out")
# figures the suite holds to: higher is better, except error findings on healthy logs
RECORDED_KEYS = ("cases", "cause_accuracy", "evidence_accuracy", "healthy_with_error_findings")


@dataclasses.dataclass(frozen=True)
class Case:
    id: str
    repo: str
    cause: str  # a CAUSES id, "healthy", or a new id
    key_line: str
    logs: tuple[Path, ...]

    @property
    def held_out(self) -> bool:
        return hashlib.sha256(self.repo.lower().encode()).digest()[0] % 10 < 3


@dataclasses.dataclass(frozen=True)
class Outcome:
    case: Case
    predicted: str  # the root cause explain names, or "healthy" for "no failure found"
    evidence: str  # the root cause's evidence line ("" when healthy)
    error_findings: int  # error-level findings (failures) explain reported

    @property
    def cause_right(self) -> bool:
        return self.predicted == self.case.cause

    @property
    def evidence_right(self) -> bool:
        return self.cause_right and bool(self.case.key_line) and self.case.key_line in self.evidence


def load_cases(corpus: Path = CORPUS) -> list[Case]:
    """Every case folder under ``corpus`` with a case.toml, sorted by id."""
    cases = []
    for folder in sorted(p for p in corpus.iterdir() if p.is_dir()) if corpus.is_dir() else []:
        manifest = folder / "case.toml"
        if not manifest.is_file():
            continue
        data = tomllib.loads(manifest.read_text(encoding="utf-8"))
        logs = tuple(
            sorted(p for p in folder.iterdir() if p.is_file() and p.suffix in LOG_SUFFIXES)
        )
        cases.append(
            Case(
                id=str(data.get("id") or folder.name),
                repo=str(data.get("repo", "")),
                cause=str(data.get("cause", "")),
                key_line=str(data.get("key_line", "")),
                logs=logs,
            )
        )
    return cases


def diagnose(case: Case, scanner: Any) -> Outcome:
    """Run explain's analysis on the case's logs, as `noderun explain LOG…` would."""
    from noderun.errors import UsageError
    from noderun.explain import examine_sources
    from noderun.explain.sources import collect

    try:
        verdict = examine_sources(collect([str(p) for p in case.logs]), scanner)
    except UsageError as err:  # a bad input is answered in one line: count it as unknown
        return Outcome(case, "unknown", str(err), 1)
    if not verdict.failures:
        return Outcome(case, "healthy", "", 0)
    root = verdict.failures[0]
    return Outcome(case, root.cause, root.evidence.text, len(verdict.failures))


def figures(outcomes: list[Outcome]) -> dict[str, Any]:
    """Cause and evidence accuracy, per-cause precision/recall, false errors on healthy logs."""
    failing = [o for o in outcomes if o.case.cause != "healthy"]
    healthy = [o for o in outcomes if o.case.cause == "healthy"]
    causes = sorted({o.case.cause for o in outcomes} | {o.predicted for o in outcomes})
    per_cause = {}
    for cause in causes:
        truth = sum(o.case.cause == cause for o in outcomes)
        said = sum(o.predicted == cause for o in outcomes)
        right = sum(o.case.cause == cause and o.cause_right for o in outcomes)
        per_cause[cause] = {
            "cases": truth,
            "predicted": said,
            "precision": _ratio(right, said),
            "recall": _ratio(right, truth),
        }
    return {
        "cases": len(outcomes),
        "failing_cases": len(failing),
        "healthy_cases": len(healthy),
        "cause_accuracy": _ratio(sum(o.cause_right for o in outcomes), len(outcomes)),
        # over the failing cases: a healthy case has no evidence line to find
        "evidence_accuracy": _ratio(sum(o.evidence_right for o in failing), len(failing)),
        "healthy_with_error_findings": sum(o.error_findings > 0 for o in healthy),
        "error_findings_on_healthy": sum(o.error_findings for o in healthy),
        "per_cause": per_cause,
        "misses": sorted(o.case.id for o in outcomes if not o.cause_right),
        "evidence_misses": sorted(
            o.case.id for o in failing if o.cause_right and not o.evidence_right
        ),
    }


def _ratio(num: int, den: int) -> float | None:
    return round(num / den, 4) if den else None


def evaluate_explain(corpus: Path = CORPUS, only: set[str] | None = None) -> dict[str, Any]:
    """The explain figures of both parts: {"tuning": {...}, "held_out": {...}}; ``only``: just
    these case ids (the regression test holds the recorded cases to their recorded figures)."""
    from noderun.explain import Scanner

    scanner = Scanner()
    cases = [c for c in load_cases(corpus) if only is None or c.id in only]
    outcomes = [diagnose(case, scanner) for case in cases]
    return {
        "tuning": figures([o for o in outcomes if not o.case.held_out]),
        "held_out": figures([o for o in outcomes if o.case.held_out]),
        "case_ids": sorted(c.id for c in cases),
    }


def evaluate_check() -> dict[str, Any] | None:
    """The check engineer's figures (bench/diagnosis_check.py), when that bench exists."""
    path = Path(__file__).with_name("diagnosis_check.py")
    if not path.is_file():
        return None
    spec = importlib.util.spec_from_file_location("diagnosis_check", path)
    if spec is None or spec.loader is None:
        return None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("diagnosis_check", module)
    spec.loader.exec_module(module)
    result = module.evaluate_check()
    return result if isinstance(result, dict) else None


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def report(part: str, data: dict[str, Any], show_misses: bool) -> Iterable[str]:
    yield f"explain {part}: {data['cases']} cases ({data['failing_cases']} failing, "
    yield f"{data['healthy_cases']} healthy)\n"
    yield f"  cause accuracy    {_fmt(data['cause_accuracy'])}\n"
    yield f"  evidence accuracy {_fmt(data['evidence_accuracy'])} (failing cases)\n"
    yield (
        f"  healthy logs with an error-level finding: {data['healthy_with_error_findings']} "
        f"({data['error_findings_on_healthy']} findings)\n"
    )
    yield "  cause                       cases  said  precision  recall\n"
    for cause, row in data["per_cause"].items():
        yield (
            f"  {cause:<27} {row['cases']:>5} {row['predicted']:>5}  "
            f"{_fmt(row['precision']):>9}  {_fmt(row['recall']):>6}\n"
        )
    if not show_misses:  # the held-out part: how many, never which (nobody may tune on them)
        yield (
            f"  misses: {len(data['misses'])}; right cause, other evidence line: "
            f"{len(data['evidence_misses'])} (ids not shown)\n"
        )
        return
    if data["misses"]:
        yield f"  misses: {', '.join(data['misses'])}\n"
    if data["evidence_misses"]:
        yield f"  right cause, other evidence line: {', '.join(data['evidence_misses'])}\n"


def check_report(check: dict[str, Any]) -> Iterable[str]:
    """The check bench's per-part figures (scalars only: its per-case list stays in --json)."""
    for part in ("tuning", "held_out"):
        figures = check.get(part)
        if isinstance(figures, dict):
            shown = ", ".join(
                f"{k}={v}" for k, v in figures.items() if isinstance(v, int | float | str)
            )
            yield f"check {part.replace('_', '-')} part: {shown}\n"


def record(result: dict[str, Any], path: Path = RECORDED) -> None:
    """Keep the figures the regression test holds the suite to."""
    kept: dict[str, Any] = {
        part: {key: result[part][key] for key in RECORDED_KEYS} for part in PARTS
    }
    kept["case_ids"] = result["case_ids"]
    path.write_text(json.dumps(kept, indent=2) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--record", action="store_true", help=f"write {RECORDED.name}")
    args = parser.parse_args(argv)
    result = evaluate_explain(args.corpus)
    check = evaluate_check()
    if args.record:
        record(result)
    held = result["held_out"]
    headline = (
        f"explain held-out cause accuracy = {_fmt(held['cause_accuracy'])} "
        f"(target >= {TARGETS['cause']}); evidence = {_fmt(held['evidence_accuracy'])} "
        f"(target >= {TARGETS['evidence']}); healthy logs with an error = "
        f"{held['healthy_with_error_findings']} (target 0)"
    )
    if args.json:
        print(json.dumps({"explain": result, "check": check}, indent=2))
    else:
        sys.stdout.write("".join(report("tuning part", result["tuning"], True)))
        sys.stdout.write("".join(report("held-out part", held, False)))
        if check is not None:
            sys.stdout.write("".join(check_report(check)))
    print(headline)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
