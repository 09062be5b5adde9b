"""doctor's same-code compares the code itself; its leftovers are orphans, never a live job's.

same-code: two venvs holding the same wheel must agree, and with the editable source tree of
the same commit (pip's RECORD differs between them: the console scripts in bin/ start with
each venv's interpreter path). leftovers: launcher processes whose parent chain reaches a live
non-launcher (a supervisor, a shell, this test) belong to a running job."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from noderun.doctor import fingerprint, probe
from noderun.doctor.fingerprint import package_digest
from tests.conftest import ROOT

MARKER = "torch.distributed.run"  # one of doctor's launcher markers, as an argument
SLEEPER = [sys.executable, "-c", "import time; time.sleep(120)", MARKER]


def _venv_with_wheel(where: Path, wheel: Path) -> Path:
    """A venv holding ``wheel`` (no dependencies: they come from this venv, after its own)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    python = where / "bin" / "python"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "-q",
            "--no-deps",
            str(wheel),
        ],
        check=True,
        capture_output=True,
    )
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (Path(purelib) / "zz_dev_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python


def _code_facts(python: Path) -> dict[str, dict[str, str]]:
    out = subprocess.run(
        [
            str(python),
            "-c",
            "import json; from noderun.doctor.fingerprint import code_facts; "
            "print(json.dumps(code_facts(None)['packages']))",
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd="/",
    )
    packages: dict[str, dict[str, str]] = json.loads(out.stdout)
    return packages


def _wheel(tmp_path: Path) -> Path:
    """The wheel make test-wheel built (NODERUN_TEST_WHEEL), or one built from this tree."""
    built = os.environ.get("NODERUN_TEST_WHEEL")
    if built:
        return Path(built)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path / "dist"),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
    )
    return next((tmp_path / "dist").glob("noderun-*.whl"))


@pytest.mark.slow
def test_two_venvs_of_one_wheel_and_the_source_tree_have_the_same_code(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path)
    first = _code_facts(_venv_with_wheel(tmp_path / "a", wheel))
    second = _code_facts(_venv_with_wheel(tmp_path / "b", wheel))
    for facts in (first, second):
        assert facts["noderun"]["basis"] == "RECORD"
        assert Path(facts["noderun"]["location"]).is_relative_to(tmp_path)
    # what the old digest hashed differs: RECORD lists bin/noderun, whose first line differs
    records = [(tmp_path / v / "bin" / "noderun").read_text().splitlines()[0] for v in "ab"]
    assert records[0] != records[1]
    assert first["noderun"]["sha256"] == second["noderun"]["sha256"]
    assert first["torch"]["sha256"] == second["torch"]["sha256"]
    # an editable install of this tree hashes its files: the same digest as the wheel's
    assert fingerprint._tree_digest(ROOT / "src" / "noderun") == first["noderun"]["sha256"]


def test_a_changed_file_changes_the_digest_and_bytecode_does_not(tmp_path: Path) -> None:
    package = tmp_path / "pkgdigest_probe"
    package.mkdir()
    (package / "__init__.py").write_text("VALUE = 1\n")
    sys.path.insert(0, str(tmp_path))
    try:
        before = package_digest("pkgdigest_probe")
        (package / "__pycache__").mkdir()
        (package / "__pycache__" / "__init__.cpython-311.pyc").write_bytes(b"compiled")
        assert package_digest("pkgdigest_probe")["sha256"] == before["sha256"]
        (package / "__init__.py").write_text("VALUE = 2\n")
        assert package_digest("pkgdigest_probe")["sha256"] != before["sha256"]
    finally:
        sys.path.remove(str(tmp_path))


@pytest.fixture
def started() -> Iterator[list[int]]:
    """PIDs the test starts; each is stopped at the end (by its own PID)."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _wait_for(pid: int, what: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if MARKER in " ".join(psutil.Process(pid).cmdline()):
                return
        except psutil.Error:
            pass
        time.sleep(0.02)
    raise AssertionError(f"{what} ({pid}) never started: {_describe(pid)}")


def _describe(pid: int) -> str:
    try:
        return str(psutil.Process(pid).as_dict(["cmdline", "status"]))
    except psutil.Error as err:
        return repr(err)


def test_leftovers_lists_orphaned_launchers_but_no_live_jobs(started: list[int]) -> None:
    # a live job: a launcher under this test, and a launcher under that launcher (agent, rank)
    agent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys, time; child = subprocess.Popen(sys.argv[1:]); "
            "print(child.pid, flush=True); time.sleep(120)",
            *SLEEPER,
            MARKER,
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    started.append(agent.pid)
    assert agent.stdout is not None
    rank = int(agent.stdout.readline())
    started.append(rank)
    # an orphan: its starter exited, so init adopted it
    starter = subprocess.run(
        [
            sys.executable,
            "-c",
            "import subprocess, sys; print(subprocess.Popen(sys.argv[1:], start_new_session=True,"
            " stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).pid)",
            *SLEEPER,
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    orphan = int(starter.stdout)
    started.append(orphan)
    for pid, what in ((agent.pid, "agent"), (rank, "rank"), (orphan, "orphan")):
        _wait_for(pid, what)
    listed = {int(line.split(":")[0]) for line in probe.leftovers()["processes"]}
    assert orphan in listed
    assert agent.pid not in listed and rank not in listed
