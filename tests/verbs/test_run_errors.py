"""Bad input to `noderun run`: one line naming the problem and the fix, exit 2, nothing started."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.conftest import SCRIPTS, noderun


def _one_line_error(result, *words: str) -> None:  # type: ignore[no-untyped-def]
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    for word in words:
        assert word in lines[0], lines[0]
    assert "hint:" in lines[0]
    assert result.stdout == ""


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["run", "missing_script.py"], ["missing_script.py", "not found"]),
        (["run", "--nnodes", "0", "SCRIPT"], ["--nnodes", "0 must be at least 1"]),
        (["run", "--nnodes", "-2", "SCRIPT"], ["--nnodes", "-2 must be at least 1"]),
        (["run", "--nproc-per-node", "two", "SCRIPT"], ["--nproc-per-node", "'two'"]),
        (["run", "--bogus", "SCRIPT"], ["noderun run does not take --bogus"]),
        (
            ["run", "--partition", "p", "SCRIPT"],
            ["does not take --partition (an option of noderun submit"],
        ),
        (["run", "--master-port", "70000", "SCRIPT"], ["--master-port", "65535"]),
        (["run"], ["required: script"]),
        (["launch"], ["invalid choice: 'launch'"]),
    ],
    ids=[
        "missing-script",
        "nnodes-0",
        "negative",
        "non-numeric",
        "unknown-option",
        "another-verbs-option",
        "port-range",
        "no-script",
        "unknown-verb",
    ],
)
def test_bad_input_is_one_line_exit_2(args: list[str], words: list[str], tmp_path: Path) -> None:
    args = [str(SCRIPTS / "gang.py") if a == "SCRIPT" else a for a in args]
    result = noderun(args, cwd=tmp_path)
    _one_line_error(result, *words)
    assert not (tmp_path / "runs").exists()


def test_port_already_in_use(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = noderun(
            [
                "run",
                "--master-port",
                str(port),
                "--run-dir",
                str(tmp_path / "r"),
                str(SCRIPTS / "gang.py"),
            ]
        )
    _one_line_error(result, f"port {port} is already in use", "--master-port")
    assert not (tmp_path / "r").exists()


def test_environment_variable_with_bad_value(tmp_path: Path) -> None:
    result = noderun(["run", str(SCRIPTS / "gang.py")], cwd=tmp_path, NODERUN_NNODES="many")
    _one_line_error(result, "NODERUN_NNODES='many'")


@pytest.mark.parametrize(
    ("record", "words"),
    [("{}", "holds a run noderun cannot continue"), ('{"status": "completed"}', "completed run")],
)
def test_existing_run_dir_is_refused(tmp_path: Path, record: str, words: str) -> None:
    (tmp_path / "run.json").write_text(record)
    result = noderun(["run", "--run-dir", str(tmp_path), str(SCRIPTS / "gang.py")])
    _one_line_error(result, words)
    assert (tmp_path / "run.json").read_text() == record


def test_dry_run_prints_the_plan_and_starts_nothing(tmp_path: Path) -> None:
    result = noderun(
        [
            "run",
            "--dry-run",
            "--nnodes",
            "3",
            "--run-dir",
            str(tmp_path / "r"),
            str(SCRIPTS / "gang.py"),
            "--lr",
            "0.1",
        ],
        NODERUN_NPROC_PER_NODE="2",
    )
    assert result.returncode == 0, result.stderr
    assert "2     localhost/2       4-5" in result.stdout
    assert result.stdout.count("torch.distributed.run") == 3
    assert "--node-rank=2" in result.stdout and "--nproc-per-node=2" in result.stdout
    assert result.stdout.rstrip().endswith("--lr 0.1")
    assert not (tmp_path / "r").exists()
