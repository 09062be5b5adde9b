"""The batch-script corpus as a regression: the figures may not drop below the recorded ones, and
no correct script may get an error."""

from __future__ import annotations

import json

import pytest
from bench.diagnosis_check import CORPUS, evaluate_check, held_out, load_cases, main

RECORDED = json.loads((CORPUS / "recorded.json").read_text())


@pytest.fixture(scope="module")
def figures() -> dict:
    return evaluate_check()


@pytest.mark.parametrize("part", ["tuning", "held_out"])
def test_figures_do_not_drop(figures: dict, part: str) -> None:
    now, recorded = figures[part], RECORDED[part]
    assert now["right_rate"] >= recorded["right_rate"], now
    assert now["false_errors"] <= recorded["false_errors"], now
    assert now["missed_mistakes"] <= recorded["missed_mistakes"], now


def test_no_error_on_any_correct_script(figures: dict) -> None:
    false = [r["id"] for r in figures["cases"] if r["false_error"]]
    assert false == []


def test_held_out_target(figures: dict) -> None:
    assert figures["held_out"]["right_rate"] >= 0.95
    assert figures["held_out"]["false_errors"] == 0


def test_corpus_shape() -> None:
    cases = load_cases()
    assert len(cases) >= 80
    assert len({c["id"] for c in cases}) == len(cases)
    mistakes = [c for c in cases if c["expected"]]
    assert len(mistakes) >= 20
    for case in cases:
        assert case["source"] and case["repo"] and "/" in case["repo"], case["id"]
        assert bool(case["mistake"]) == bool(case["expected"]), case["id"]
        assert case["id"] == case["dir"].name
    # the split rule holds out about three repositories in ten, and both parts have mistakes
    assert 0.15 < sum(held_out(c["repo"]) for c in cases) / len(cases) < 0.45
    assert any(held_out(c["repo"]) for c in mistakes)


def test_main_prints_headline(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 0
    out = capsys.readouterr().out
    assert out.startswith("check held-out: ") and "target" in out
