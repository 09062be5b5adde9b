"""The real-log corpus as a regression: explain's figures on it never drop below the recorded
ones (tests/corpus/explain/recorded.json, written by `bench/diagnosis_corpus.py --record`)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
RECORDED = ROOT / "tests" / "corpus" / "explain" / "recorded.json"


def _bench() -> ModuleType:
    path = ROOT / "bench" / "diagnosis_corpus.py"
    spec = importlib.util.spec_from_file_location("diagnosis_corpus", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["diagnosis_corpus"] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def recorded() -> dict[str, Any]:
    if not RECORDED.is_file():
        pytest.fail(f"{RECORDED} is missing: run `python bench/diagnosis_corpus.py --record`")
    data: dict[str, Any] = json.loads(RECORDED.read_text())
    return data


@pytest.fixture(scope="module")
def measured(recorded: dict[str, Any]) -> dict[str, Any]:
    """The figures on the recorded cases: cases added since do not move them (re-record)."""
    result: dict[str, Any] = _bench().evaluate_explain(only=set(recorded["case_ids"]))
    return result


@pytest.mark.parametrize("part", ["tuning", "held_out"])
def test_no_figure_drops_below_the_recorded_one(part, measured, recorded) -> None:
    now, then = measured[part], recorded[part]
    assert now["cases"] == then["cases"], "recorded corpus cases were removed or renamed"
    # which held-out cases miss is never shown (nobody may tune on them): how many, for the part
    misses = now["misses"] if part == "tuning" else f"{len(now['misses'])} (ids not shown)"
    for key in ("cause_accuracy", "evidence_accuracy"):
        if then[key] is not None:
            assert now[key] is not None and now[key] >= then[key], (
                f"{part} {key} dropped from {then[key]} to {now[key]}; misses: {misses}"
            )
    assert now["healthy_with_error_findings"] <= then["healthy_with_error_findings"]


def test_the_split_is_the_fixed_rule() -> None:
    bench = _bench()
    case = bench.Case("x", "pytorch/pytorch", "healthy", "", ())
    import hashlib

    expected = hashlib.sha256(b"pytorch/pytorch").digest()[0] % 10 < 3
    assert case.held_out is expected
    assert bench.Case("x", "PyTorch/PyTorch", "healthy", "", ()).held_out is expected


def test_the_bench_scores_a_case_it_gets_wrong_as_wrong(tmp_path: Path) -> None:
    bench = _bench()
    for name, cause, key, log in (
        ("oom", "out-of-memory", "CUDA out of memory", "OutOfMemoryError: CUDA out of memory"),
        ("said-wrong", "port-in-use", "Address already in use", "MemoryError"),
        ("ok", "healthy", "", "epoch 1 loss 0.3\ndone"),
    ):
        (tmp_path / name).mkdir()
        (tmp_path / name / "case.toml").write_text(
            f'id = "{name}"\nrepo = "a/b"\ncause = "{cause}"\nkey_line = "{key}"\n'
        )
        (tmp_path / name / "log.txt").write_text(log + "\n")
    result = bench.evaluate_explain(tmp_path)
    part = result["held_out"] if result["held_out"]["cases"] else result["tuning"]
    assert part["cases"] == 3
    assert part["cause_accuracy"] == pytest.approx(2 / 3, abs=1e-3)
    assert part["evidence_accuracy"] == 0.5
    assert part["misses"] == ["said-wrong"]
    assert part["per_cause"]["out-of-memory"]["precision"] == 0.5
