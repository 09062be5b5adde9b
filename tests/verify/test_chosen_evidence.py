"""`noderun verify` of a script that calls noderun.init() but chose to write no metrics.csv and
no checkpoints (the README's first example): SKIP, not FAIL, unless --require asks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from noderun import cli
from tests.docs.test_snippets import run_snippet_of

pytestmark = pytest.mark.slow


def test_metrics_and_checkpoints_the_script_never_meant_to_write(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the README's train.py and its commands, run as written (that page's test runs them only
    # here): noderun run on 2 x 2 ranks, then noderun verify, exit 0 of both asserted
    run_snippet_of(
        "README.md",
        "tests/verify/test_chosen_evidence.py::"
        "test_metrics_and_checkpoints_the_script_never_meant_to_write",
        tmp_path,
    )
    run_dir = tmp_path / "runs" / "readme"
    assert "noderun.init()" in (tmp_path / "train.py").read_text()
    capsys.readouterr()

    code = cli.main(["verify", str(run_dir), "--json"])
    report = json.loads(capsys.readouterr().out)
    found = {c["check"]: c for c in report["checks"]}
    assert code == 0 and report["healthy"] is True, report["checks"]
    assert found["metrics"]["status"] == "SKIP", found["metrics"]
    assert found["checkpoint"]["status"] == "SKIP", found["checkpoint"]
    assert found["ddp-init"]["status"] == "PASS", found["ddp-init"]

    code = cli.main(["verify", str(run_dir), "--json", "--require", "metrics,checkpoint"])
    report = json.loads(capsys.readouterr().out)
    found = {c["check"]: c for c in report["checks"]}
    assert code == 1 and report["healthy"] is False
    assert found["metrics"]["status"] == "FAIL" and found["checkpoint"]["status"] == "FAIL"
