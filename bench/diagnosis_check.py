"""`noderun check` on the batch-script corpus (tests/corpus/check/): how many scripts it judges
right, on the tuning part and on the held-out part, split by source repository.

A case is judged right when the error-level finding codes equal its ``expected`` list and, unless
``warnings_ok``, it gets no warning either. A false error is an error-level finding on a case whose
``expected`` is empty (a correct script); a missed mistake is an expected code that did not come.
A case is held out when ``sha256(repo.lower())[0] % 10 < 3`` (fixed before any tuning).

    .venv/bin/python bench/diagnosis_check.py [--json] [--cases]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tomllib
from pathlib import Path
from typing import Any

from noderun.check import Severity, lint_sbatch

CORPUS = Path(__file__).resolve().parent.parent / "tests" / "corpus" / "check"
TARGET_RIGHT = 0.95


def held_out(repo: str) -> bool:
    """The fixed split: about three source repositories in ten are held out."""
    return hashlib.sha256(repo.lower().encode()).digest()[0] % 10 < 3


def load_cases(root: Path = CORPUS) -> list[dict[str, Any]]:
    """Every case directory's case.toml, with its script text and directory."""
    cases = []
    for case_toml in sorted(root.glob("*/case.toml")):
        case = tomllib.loads(case_toml.read_text(encoding="utf-8"))
        case["dir"] = case_toml.parent
        case["text"] = (case_toml.parent / "script.sh").read_text(encoding="utf-8")
        cases.append(case)
    return cases


def judge(case: dict[str, Any]) -> dict[str, Any]:
    """Lint one case (file checks only where the case asks for them) and compare."""
    paths = bool(case.get("paths", False))
    findings = lint_sbatch(
        case["text"],
        script_path=case["dir"] / "script.sh" if paths else None,
        submit_dir=case["dir"] if paths else None,
    )
    errors = sorted({f.code for f in findings if f.severity is Severity.ERROR})
    warnings = sorted({f.code for f in findings if f.severity is Severity.WARNING})
    expected = sorted(set(case["expected"]))
    right = errors == expected and (bool(case.get("warnings_ok", True)) or not warnings)
    return {
        "id": case["id"],
        "repo": case["repo"],
        "held_out": held_out(case["repo"]),
        "expected": expected,
        "errors": errors,
        "warnings": warnings,
        "right": right,
        "false_error": not expected and bool(errors),
        "missed": sorted(set(expected) - set(errors)),
    }


def _summary(results: list[dict[str, Any]]) -> dict[str, Any]:
    correct = [r for r in results if not r["expected"]]
    mistakes = [r for r in results if r["expected"]]
    right = sum(r["right"] for r in results)
    return {
        "cases": len(results),
        "correct_scripts": len(correct),
        "mistake_scripts": len(mistakes),
        "right": right,
        "right_rate": round(right / len(results), 4) if results else 0.0,
        "false_errors": sum(r["false_error"] for r in results),
        "missed_mistakes": sum(bool(r["missed"]) for r in mistakes),
    }


def evaluate_check(root: Path = CORPUS) -> dict[str, Any]:
    """The figures for the tuning part, the held-out part and all cases, plus each case."""
    results = [judge(case) for case in load_cases(root)]
    return {
        "tuning": _summary([r for r in results if not r["held_out"]]),
        "held_out": _summary([r for r in results if r["held_out"]]),
        "all": _summary(results),
        "cases": results,
    }


def headline(figures: dict[str, Any]) -> str:
    held, tune = figures["held_out"], figures["tuning"]
    ok = held["right_rate"] >= TARGET_RIGHT and held["false_errors"] == 0
    return (
        f"check held-out: {held['right']}/{held['cases']} right ({held['right_rate']:.1%}), "
        f"{held['false_errors']} false errors, {held['missed_mistakes']} missed; tuning: "
        f"{tune['right']}/{tune['cases']} ({tune['right_rate']:.1%}), "
        f"{tune['false_errors']} false errors, {tune['missed_mistakes']} missed; "
        f"target >=95% and 0 false errors on held-out: {'met' if ok else 'NOT met'}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--cases", action="store_true", help="list every wrongly judged case")
    args = parser.parse_args(argv)
    figures = evaluate_check()
    if args.json:
        print(json.dumps({k: v for k, v in figures.items() if k != "cases"}, indent=2))
    if args.cases:
        for r in figures["cases"]:
            if not r["right"] and not r["held_out"]:
                print(
                    f"tuning {r['id']}: expected {r['expected']} got errors {r['errors']} "
                    f"warnings {r['warnings']}"
                )
    print(headline(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
