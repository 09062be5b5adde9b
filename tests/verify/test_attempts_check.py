"""verify's attempts check: a run stopped from outside and continued is fine, a failure is not."""

from __future__ import annotations

from pathlib import Path

import pytest

from noderun.verify.evidence import Loaded, RunEvidence
from noderun.verify.model import Expectations
from noderun.verify.run_checks import check_attempts


def _evidence(tmp_path: Path, record: dict) -> RunEvidence:
    return RunEvidence(
        run_dir=tmp_path,
        run=Loaded(tmp_path / "run.json", record),
        runtime=Loaded(tmp_path / "runtime.json", error="missing"),
        metrics_header=[],
        metrics=Loaded(tmp_path / "metrics.csv", error="missing"),
    )


@pytest.mark.parametrize(
    ("earlier", "expected"),
    [
        ([], "PASS"),
        ([{"status": "preempted"}], "PASS"),
        ([{"status": "interrupted"}, {"status": "preempted"}], "PASS"),
        ([{"status": "failed", "failure": {"rank": 1, "reason": "killed by SIGKILL"}}], "WARN"),
    ],
)
def test_attempts(tmp_path: Path, earlier: list, expected: str) -> None:
    record = {"status": "completed", "attempts": earlier}
    check = check_attempts(_evidence(tmp_path, record), Expectations())
    assert check.status.value == expected, check
    if earlier:
        assert f"{len(earlier) + 1} attempts" in check.detail
    if expected == "WARN":
        assert "rank 1: killed by SIGKILL" in check.detail
