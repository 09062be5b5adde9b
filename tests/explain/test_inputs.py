"""What `noderun explain` accepts: files, directories, run directories, SLURM job ids; and
bad input (missing, empty, binary, unknown job): one line naming it, exit code 2."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from noderun.explain.sources import failed_rank
from tests.conftest import cli
from tests.slurm.lab import require_lab, wait

FIXTURES = Path(__file__).parent / "fixtures"


def explain_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "noderun", "explain", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
    )


def _binary(root: Path) -> str:
    (root / "model.pt").write_bytes(b"PK\x03\x04\x00\x00binary\x00" * 100)
    return str(root / "model.pt")


def _empty_dir(root: Path) -> str:
    (root / "empty").mkdir()
    return str(root / "empty")


def _dir_without_logs(root: Path) -> str:
    (root / "ckpt").mkdir()
    (root / "ckpt" / "state.pt").write_bytes(b"\x00\x01")
    return str(root / "ckpt")


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (lambda root: str(root / "nope.log"), "does not exist"),
        (_binary, "is a binary file"),
        (_empty_dir, "holds no log files"),
        (_dir_without_logs, "holds no log files"),
    ],
    ids=["missing", "binary", "empty-dir", "dir-without-logs"],
)
def test_bad_input_is_one_line_exit_2(tmp_path, make, words):
    target = make(tmp_path)
    done = explain_cli(target)
    assert done.returncode == 2
    assert done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1
    assert words in done.stderr and target in done.stderr


def test_several_inputs_and_a_directory_of_logs(tmp_path):
    logs = tmp_path / "logs"
    shutil.copytree(FIXTURES / "torch", logs)
    done = explain_cli(str(logs / "port_in_use.log"), str(FIXTURES / "run_hang"))
    assert done.returncode == 1  # a failure was found
    assert done.stdout.startswith("root cause: ")
    done = explain_cli(str(logs))
    assert done.returncode == 1 and "root cause:" in done.stdout


@pytest.mark.slurm
def test_a_slurm_job_id(tmp_path):
    """A real failing job on the lab (python without srun), explained by its id alone."""
    require_lab()
    scenario = Path(__file__).parent / "scenarios"
    submitted = subprocess.run(
        [
            "sbatch",
            "--parsable",
            "--chdir",
            str(tmp_path),
            f"--export=ALL,PYTHON={sys.executable},SCENARIO_DIR={scenario}",
            str(scenario / "missing_srun_noderun.sbatch"),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    job = submitted.stdout.strip().split(";")[0]
    assert wait(job).final  # scontrol polled from 0.5 s on, until the job ended
    done = cli(["explain", job], cwd=tmp_path)
    assert done.returncode == 1, done.stderr  # a failure was found (as above)
    assert done.stdout.startswith("root cause: missing-launcher")
    assert f"slurm-{job}.out" in done.stdout


@pytest.mark.slurm
def test_unknown_job_id_is_exit_2():
    require_lab()
    done = cli(["explain", "987654321"])
    assert done.returncode == 2
    assert "unknown SLURM job id 987654321" in done.stderr


@pytest.mark.parametrize(
    ("record", "expected"),
    [
        (
            {"hosts": ["h1", "h2"], "failure": {"rank": 3, "node_rank": 1, "local_rank": 1,
                                                "reason": "killed by SIGKILL"}},
            "rank 3 (node 1 on h2, local rank 1): killed by SIGKILL",
        ),
        (
            {"hosts": ["h1"], "failure": {"rank": None, "node_rank": 0, "reason": "agent failed"}},
            "node 0 on h1: agent failed",
        ),
        ({"failure": {"rank": 0, "node_rank": 0, "reason": "exit code 1"}},
         "rank 0 (node 0): exit code 1"),
        ({"status": "completed"}, None),
    ],
)  # fmt: skip
def test_failed_rank_names_node_and_host_from_run_json(
    record: dict[str, object], expected: str | None
) -> None:
    assert failed_rank(record) == expected
