"""make test-wheel: the suite's launcher, rank-entry and doctor tests run against the built wheel,
installed non-editable in a scratch venv. This checks that they really do: noderun is imported
from that venv's site-packages, not from src/, and its ranks start from there by path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from importlib import metadata
from pathlib import Path

import pytest

import noderun
from noderun.plan.launch import RANK_ENTRY
from tests.conftest import ROOT

pytestmark = pytest.mark.skipif(
    os.environ.get("NODERUN_TEST_INSTALLED") != "wheel",
    reason="checks the installed wheel: runs in make test-wheel",
)


def test_noderun_comes_from_site_packages_not_the_source_tree() -> None:
    site = Path(sysconfig.get_paths()["purelib"]).resolve()
    package = Path(noderun.__file__).resolve().parent
    assert package == site / "noderun"
    assert not package.is_relative_to(ROOT / "src")
    assert Path(RANK_ENTRY).resolve() == site / "noderun" / "rank_entry.py"
    direct = json.loads(metadata.distribution("noderun").read_text("direct_url.json") or "{}")
    assert not (direct.get("dir_info") or {}).get("editable")


def test_the_installed_package_is_whole() -> None:
    site = Path(sysconfig.get_paths()["purelib"])
    assert (site / "noderun" / "py.typed").is_file()
    dist = metadata.distribution("noderun")
    assert dist.version == noderun.__version__
    assert dist.metadata["License-Expression"] == "Apache-2.0"
    assert any(str(f).endswith("LICENSE") for f in dist.files or [])
    done = subprocess.run(
        [str(Path(sys.executable).parent / "noderun"), "--version"],
        capture_output=True,
        text=True,
        cwd="/",
        check=True,
    )
    assert done.stdout.strip() == f"noderun {noderun.__version__}"
