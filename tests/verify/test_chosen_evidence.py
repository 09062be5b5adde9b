"""`noderun verify` of a script that calls noderun.init() but chose to write no metrics.csv and
no checkpoints (the README's first example): SKIP, not FAIL, unless --require asks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from noderun import cli
from tests.conftest import noderun

pytestmark = pytest.mark.slow

SCRIPT = """
import noderun

with noderun.init() as ctx:
    total = ctx.all_reduce_sum(1.0)
    ctx.print(f"{total:.0f} ranks")
"""


def test_metrics_and_checkpoints_the_script_never_meant_to_write(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    run_dir = tmp_path / "run"
    done = noderun(["run", "--nproc-per-node", "2", "--run-dir", str(run_dir), str(script)])
    assert done.returncode == 0, done.stdout + done.stderr
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
