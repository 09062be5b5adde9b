"""Stall detection under ``noderun run`` (2 simulated nodes); ``noderun stacks`` on a live run."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from noderun.exit_codes import EXIT_STALLED
from noderun.stacks.capture import find_ranks
from tests.conftest import cli, noderun, processes_running, run_args, start_noderun
from tests.stacks.conftest import (
    line_of,
    path_with_py_spy,
    path_without_py_spy,
    wait_for_file,
)

pytestmark = pytest.mark.slow
TIMEOUT = 5


def stall_args(
    script: Path, run_dir: Path, nnodes: int, timeout: float, kill: bool, nproc: int = 2
) -> list[str]:
    args = run_args(script, run_dir, nnodes=nnodes, nproc=nproc)
    options = ["--stall-timeout", f"{timeout:g}"] + (["--on-stall", "kill"] if kill else [])
    return [*args[:-1], *options, args[-1]]


def test_stuck_rank_is_named_with_its_frame_and_the_job_stopped(
    tmp_path: Path, stuck_script: Path
) -> None:
    run_dir = tmp_path / "run"
    result = noderun(
        stall_args(stuck_script, run_dir, 2, TIMEOUT, kill=True), timeout=240,
        PATH=path_with_py_spy(),
    )  # fmt: skip
    assert result.returncode == EXIT_STALLED, result.stderr
    frame = f"{stuck_script.name}:{line_of('time.sleep(0.1)')}"
    collective = f"{stuck_script.name}:{line_of('dist.all_reduce(batch)')}"
    verdict = (
        f"stalled-rank: rank 1 on localhost/0 stuck in load_batch() at {frame} ← train_step(), "
        f"while ranks 0,2,3 wait in all_reduce in train_step() at {collective} ← main()"
    )
    assert f"noderun: {verdict}" in result.stderr
    assert f"rank 1: load_batch() at {frame} ← train_step()   <- straggler" in result.stderr
    reports = list(run_dir.glob("stall-*.txt"))
    assert len(reports) == 1
    report = reports[0].read_text()
    assert verdict in report.splitlines() and "stacks by py-spy" in report
    stuck_at = float((run_dir / "stuck_at").read_text())
    assert reports[0].stat().st_mtime - stuck_at < TIMEOUT + 10
    record = json.loads((run_dir / "run.json").read_text())
    assert record["status"] == "stalled" and record["exit_code"] == EXIT_STALLED
    assert not processes_running(str(stuck_script))
    explained = cli(["explain", str(run_dir)])
    assert explained.stdout.startswith("root cause: stalled-rank:"), explained.stdout
    assert verdict in explained.stdout


def test_ranks_in_different_collectives_are_named_a_deadlock(
    tmp_path: Path, stuck_script: Path
) -> None:
    run_dir = tmp_path / "run"
    result = noderun(
        stall_args(stuck_script, run_dir, 1, TIMEOUT, kill=True), timeout=240,
        PATH=path_with_py_spy(), STUCK_MODE="deadlock",
    )  # fmt: skip
    assert result.returncode == EXIT_STALLED, result.stderr
    gather = f"all_gather in train_step() at {stuck_script.name}:{line_of('dist.all_gather(')}"
    reduce = f"all_reduce in train_step() at {stuck_script.name}:{line_of('dist.all_reduce(b')}"
    assert (
        "noderun: collective-deadlock: ranks call different collectives, so none completes: "
        f"rank 0 in {reduce} ← main(); rank 1 in {gather} ← main()"
    ) in result.stderr
    explained = cli(["explain", str(run_dir)])
    assert explained.stdout.startswith("root cause: collective-deadlock:"), explained.stdout


def test_quiet_periods_shorter_than_the_timeout_raise_nothing(
    tmp_path: Path, stuck_script: Path
) -> None:
    run_dir = tmp_path / "run"
    result = noderun(
        stall_args(stuck_script, run_dir, 1, 6, kill=True), timeout=240, PATH=path_with_py_spy(),
        STUCK_MODE="none", STUCK_QUIET="2", STUCK_STEPS="5",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "step 4" in result.stdout
    assert "stall" not in result.stdout + result.stderr
    assert not list(run_dir.glob("stall-*.txt"))


def _start(
    script: Path, run_dir: Path, timeout: float = 0, nproc: int = 2, **env: str
) -> subprocess.Popen[str]:
    return start_noderun(stall_args(script, run_dir, 2, timeout, kill=False, nproc=nproc), **env)


def _wait_for_report(run_dir: Path, job: subprocess.Popen[str]) -> Path:
    while not list(run_dir.glob("stall-*.txt")):
        wait_for_file(run_dir / "stuck_at", job)  # fails if the job ended
        time.sleep(0.1)
    return next(run_dir.glob("stall-*.txt"))


def test_stacks_of_a_live_run_from_another_shell(tmp_path: Path, stuck_script: Path) -> None:
    run_dir = tmp_path / "run"
    job = _start(stuck_script, run_dir, timeout=3, PATH=path_with_py_spy())  # report, keep going
    try:
        report = _wait_for_report(run_dir, job)
        assert "stalled-rank: rank 1 on localhost/0" in report.read_text()
        shown = cli(["stacks", str(run_dir)], PATH=path_with_py_spy())
        assert shown.returncode == 0, shown.stderr
        frame = f"{stuck_script.name}:{line_of('time.sleep(0.1)')}"
        assert f"stacks of 4 rank(s) of run {run_dir} (py-spy):" in shown.stdout
        assert f"  rank 1: load_batch() at {frame} ← train_step()   <- straggler" in shown.stdout
        assert "  ranks 0,2,3: all_reduce in train_step()" in shown.stdout
        as_json = json.loads(
            cli(["stacks", "--json", str(run_dir)], PATH=path_with_py_spy()).stdout
        )
        assert as_json["verdict"]["kind"] == "stalled-rank" and as_json["verdict"]["ranks"] == [1]
        assert [r["source"] for r in as_json["ranks"]] == ["py-spy"] * 4
        # a plain script has no faulthandler fallback: without py-spy, one line says so
        blind = cli(["stacks", str(run_dir)], PATH=path_without_py_spy())
        assert blind.stderr.count("py-spy not found on PATH") == 1, blind.stderr
        assert (
            "rank 1: no stack (no faulthandler fallback: the script does not call noderun.init())"
            in blind.stdout
        )
        (run_dir / "release").touch()
        assert job.wait(timeout=120) == 0
        assert job.stdout is not None and "noderun: the job keeps waiting" in job.stdout.read()
    finally:
        job.kill() if job.poll() is None else None
        job.wait()
    assert not processes_running(str(stuck_script))


def test_without_py_spy_ranks_of_noderun_init_dump_through_faulthandler(
    tmp_path: Path, stuck_script: Path
) -> None:
    """2 nodes x 1 rank: rank 1 stuck, rank 0 waiting in all_reduce (a world of 4, with its
    groups of ranks, is test_stacks_of_a_live_run_from_another_shell's)."""
    run_dir = tmp_path / "run"
    job = _start(stuck_script, run_dir, nproc=1, STUCK_NODERUN="1")
    try:
        wait_for_file(run_dir / "stuck_at", job)
        shown = cli(["stacks", str(run_dir)], PATH=path_without_py_spy())
        assert shown.returncode == 0, shown.stderr
        notes = [line for line in shown.stderr.splitlines() if line.startswith("noderun:")]
        assert len(notes) == 1 and "py-spy not found on PATH" in notes[0], shown.stderr
        frame = f"{stuck_script.name}:{line_of('time.sleep(0.1)')}"
        assert "(faulthandler):" in shown.stdout
        assert f"rank 1: load_batch() at {frame} ← train_step()   <- straggler" in shown.stdout
        _without_ptrace_rights(run_dir, frame)
        (run_dir / "release").touch()  # the dumps did not disturb the ranks: the run completes
        assert job.wait(timeout=120) == 0, job.stdout.read() if job.stdout else ""
    finally:
        job.kill() if job.poll() is None else None
        job.wait()


def _without_ptrace_rights(run_dir: Path, frame: str) -> None:
    """py-spy present but refused (rank 1 already traced: EPERM): one line, then faulthandler."""
    import shutil

    if shutil.which("strace") is None:
        return
    pid = next(r.pid for r in find_ranks(run_dir=run_dir) if r.rank == 1)
    tracer = subprocess.Popen(
        ["strace", "-p", str(pid), "-o", "/dev/null"], stderr=subprocess.PIPE, text=True
    )
    try:
        assert tracer.stderr is not None and "attached" in tracer.stderr.readline()
        shown = cli(["stacks", str(run_dir)], PATH=path_with_py_spy())
        notes = [line for line in shown.stderr.splitlines() if line.startswith("noderun:")]
        assert len(notes) == 1, shown.stderr
        assert "py-spy could not read rank 1" in notes[0] and "EPERM" in notes[0]
        assert "ptrace rights" in notes[0] and "trying faulthandler" in notes[0]
        assert "(faulthandler, py-spy):" in shown.stdout
        assert f"rank 1: load_batch() at {frame} ← train_step()" in shown.stdout
    finally:
        tracer.terminate()
        tracer.wait()
