"""The rank entry notes whether the script formed one process group; the launcher and verify
judge N ranks that never did. A fake ``torch`` package stands in (the real one takes seconds
to import): the watch wraps whatever ``torch.distributed.distributed_c10d`` defines."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from noderun import group_watch
from noderun.plan.launch import RANK_ENTRY

C10D = """\
_world = 0
def init_process_group(backend=None, **kwargs):
    global _world
    _world = int(kwargs.get("world_size", 4))
def get_world_size():
    return _world
"""
DISTRIBUTED = "from .distributed_c10d import *\nfrom .distributed_c10d import init_process_group\n"


def _fake_torch(root: Path) -> None:
    (root / "torch" / "distributed").mkdir(parents=True)
    (root / "torch" / "__init__.py").write_text("")
    (root / "torch" / "distributed" / "__init__.py").write_text(DISTRIBUTED)
    (root / "torch" / "distributed" / "distributed_c10d.py").write_text(C10D)


def _run_rank(tmp_path: Path, rank: int, body: str) -> dict[str, object] | None:
    _fake_torch(tmp_path / "lib")
    script = tmp_path / "train.py"
    script.write_text(body)
    env = {
        "PYTHONPATH": str(tmp_path / "lib"),
        "NODERUN__RUN_DIR": str(tmp_path / "run"),
        "RANK": str(rank),
        "PATH": "/usr/bin:/bin",
    }
    done = subprocess.run(
        [sys.executable, RANK_ENTRY, str(script)], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    path = tmp_path / "run" / "logs" / f"rank{rank}.group.json"
    return json.loads(path.read_text()) if path.exists() else None


@pytest.mark.parametrize(
    ("body", "calls", "world"),
    [
        ("import torch.distributed as dist\ndist.init_process_group('gloo')\n", 1, 4),
        ("import torch.distributed as dist\ndist.init_process_group('gloo', world_size=1)\n", 1, 1),
        ("from torch.distributed import distributed_c10d as c\nc.init_process_group()\n", 1, 4),
        ("import torch\n", 0, 0),
    ],
)
def test_the_rank_records_the_group_it_formed(
    tmp_path: Path, body: str, calls: int, world: int
) -> None:
    record = _run_rank(tmp_path, 3, body)
    assert record is not None
    assert (record["rank"], record["init_calls"], record["world_size"]) == (3, calls, world)


def test_a_script_without_torch_leaves_no_record(tmp_path: Path) -> None:
    assert _run_rank(tmp_path, 0, "print('no torch here')\n") is None


def _records(run_dir: Path, worlds: list[int], frameworks: list[str] | None = None) -> None:
    (run_dir / "logs").mkdir(parents=True)
    for rank, world in enumerate(worlds):
        record = {"rank": rank, "init_calls": int(world > 0), "world_size": world,
                  "frameworks": frameworks or []}  # fmt: skip
        (run_dir / "logs" / f"rank{rank}.group.json").write_text(json.dumps(record))


@pytest.mark.parametrize(
    ("frameworks", "fix"),
    [
        ([], "init_process_group()"),
        (["lightning"], "Trainer(num_nodes=2, devices=2)"),
        (["fabric"], "LT_NUM_NODES=2"),
        (["accelerate"], "ACCELERATE_USE_CPU=1"),
    ],
)
def test_ranks_that_never_formed_a_group_are_named_with_the_frameworks_fix(
    tmp_path: Path, frameworks: list[str], fix: str
) -> None:
    _records(tmp_path, [0, 0, 0, 0], frameworks)
    note = group_watch.not_one_group(tmp_path, 4, nnodes=2)
    assert note is not None and "never called init_process_group" in note and fix in note


def test_a_group_the_framework_did_not_use(tmp_path: Path) -> None:
    """accelerate on CPU without ACCELERATE_USE_CPU: a group of 4 forms, each rank trains alone."""
    (tmp_path / "logs").mkdir()
    for rank in range(4):
        record = {"rank": rank, "init_calls": 1, "world_size": 4,
                  "frameworks": ["accelerate"], "framework_world": 1}  # fmt: skip
        (tmp_path / "logs" / f"rank{rank}.group.json").write_text(json.dumps(record))
    note = group_watch.not_one_group(tmp_path, 4, nnodes=2)
    assert note is not None and "a group of 4 formed, but accelerate ran every rank" in note
    assert "ACCELERATE_USE_CPU=1" in note


def test_groups_of_one_and_a_real_group(tmp_path: Path) -> None:
    _records(tmp_path / "ones", [1, 1, 1])
    note = group_watch.not_one_group(tmp_path / "ones", 3)
    assert note is not None and "group of one" in note
    _records(tmp_path / "one", [3, 3, 3])
    assert group_watch.not_one_group(tmp_path / "one", 3) is None
    _records(tmp_path / "some", [0, 0])  # a rank left no record: nothing certain
    assert group_watch.not_one_group(tmp_path / "some", 3) is None


def test_the_launcher_says_so_last_and_keeps_its_exit_code(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _records(tmp_path, [0, 0])
    assert group_watch.report(tmp_path, 2, 1, 0) == 0
    assert "NOT distributed" in capsys.readouterr().err
    assert group_watch.report(tmp_path, 2, 1, 1) == 1  # a failed run is judged as failed
    assert capsys.readouterr().err == ""


def test_verify_fails_a_run_whose_ranks_never_formed_one_group(tmp_path: Path) -> None:
    from noderun.verify import verify_run_dir

    run = {"status": "completed", "exit_code": 0, "start_time": "2026-11-26T00:00:00+00:00",
           "topology": {"nnodes": 2, "nproc_per_node": 2, "world_size": 4}}  # fmt: skip
    (tmp_path / "run.json").write_text(json.dumps(run))
    _records(tmp_path, [0, 0, 0, 0], ["fabric"])
    check = next(c for c in verify_run_dir(tmp_path).checks if c.name == "one-group")
    assert check.status.value == "FAIL" and "4 independent" in check.detail, check
    assert "LT_DEVICES=2" in check.fix
    for rank in range(4):
        (tmp_path / "logs" / f"rank{rank}.group.json").write_text(
            json.dumps({"rank": rank, "init_calls": 1, "world_size": 4})
        )
    check = next(c for c in verify_run_dir(tmp_path).checks if c.name == "one-group")
    assert check.status.value == "PASS", check
