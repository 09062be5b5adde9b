"""On the Slurm lab (2 nodes x 2): a submitted job's stuck rank named by the stall watcher, and
``noderun stacks JOB_ID`` from another shell (srun --overlap on the job's nodes)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from noderun.exit_codes import EXIT_STALLED
from tests.conftest import ROOT, cli, noderun
from tests.slurm.lab import job_id_of, job_nodes, read_json, require_lab, wait
from tests.stacks.conftest import STUCK, line_of, path_with_py_spy, wait_for_file

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
TIMEOUT = 8


@pytest.fixture(autouse=True)
def _lab() -> None:
    require_lab()


def _submit(run_dir: Path, *options: str, wait_for_it: bool = False) -> tuple[int, str]:
    result = noderun(
        ["submit", *(["--wait"] if wait_for_it else []), "--nodes", "2", "--nproc-per-node", "2",
         "--time", "5", "--run-dir", str(run_dir), *options, str(STUCK)],
        timeout=300, cwd=ROOT, PATH=path_with_py_spy(),
    )  # fmt: skip
    return result.returncode, result.stdout + result.stderr


def test_submitted_job_stall_names_the_stuck_rank_host_and_frame(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    code, output = _submit(
        run_dir, "--stall-timeout", str(TIMEOUT), "--on-stall", "kill", wait_for_it=True
    )
    assert code == EXIT_STALLED, output
    frame = f"stuck_rank.py:{line_of('time.sleep(0.1)')}"
    first = job_nodes(job_id_of(output))[1][0]  # rank 1's node: the job's first, whichever it is
    verdict = f"stalled-rank: rank 1 on {first} stuck in load_batch() at {frame} ← train_step()"
    assert f"noderun: {verdict}, while ranks 0,2,3 wait in all_reduce" in output
    reports = list(run_dir.glob("stall-*.txt"))
    assert len(reports) == 1 and verdict in reports[0].read_text()
    stuck_at = float((run_dir / "stuck_at").read_text())
    assert reports[0].stat().st_mtime - stuck_at < TIMEOUT + 10
    assert read_json(run_dir / "run.json")["status"] == "stalled"
    explained = cli(["explain", str(run_dir)])
    assert explained.stdout.startswith("root cause: stalled-rank:") and verdict in explained.stdout


def test_stacks_of_a_submitted_job_by_its_id(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    code, output = _submit(run_dir, "--stall-timeout", "0")
    assert code == 0, output
    job_id = job_id_of(output)
    try:
        wait_for_file(run_dir / "stuck_at")
        shown = cli(["stacks", "--json", job_id], PATH=path_with_py_spy())
        assert shown.returncode == 0, shown.stderr
        data = json.loads(shown.stdout)
        assert data["world_size"] == 4 and data["missing"] == []
        assert data["verdict"]["kind"] == "stalled-rank" and data["verdict"]["ranks"] == [1]
        hosts = {r["rank"]: r["host"] for r in data["ranks"]}
        first, second = sorted(set(hosts.values()))  # the job's nodes, whichever the lab gave
        assert hosts == {0: first, 1: first, 2: second, 3: second}
        text = cli(["stacks", str(run_dir)], PATH=path_with_py_spy()).stdout
        assert f"of run {run_dir} (SLURM job {job_id})" in text
        assert "rank 1: load_batch()" in text and "<- straggler" in text
    finally:
        (run_dir / "release").touch()
    assert wait(job_id).status == "completed"
