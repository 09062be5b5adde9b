"""Routing srun's labelled output to per-rank logs, naming the failure, parsing SLURM's answers.
Pure: recorded lines in, files and messages out."""

from __future__ import annotations

import io
import json
import subprocess
from pathlib import Path

import pytest

from noderun.backends import slurm
from noderun.backends.slurm_step import StepSupervisor
from noderun.backends.slurm_text import JobState, gpus_of_gres, parse_scontrol_job
from noderun.plan.slurm import LaunchMode, StepPlan

ROOT_CAUSE = """\
1: Root Cause (first observed failure):
1: [0]:
1:   time      : 2026-11-22_10:28:06
1:   host      : node2
1:   rank      : 3 (local_rank: 1)
1:   exitcode  : -9 (pid: 9689)  (SIGKILL)
1:   traceback : Signal 9 (SIGKILL) received by PID 9689
"""
PEER_ROOT_CAUSE = ROOT_CAUSE.replace("1: ", "0: ").replace("3 (local_rank: 1)", "1 (local_rank: 1)")
PEER_ROOT_CAUSE = PEER_ROOT_CAUSE.replace("-9 (pid", "1 (pid")


def _supervisor(tmp_path: Path, mode: LaunchMode) -> tuple[StepSupervisor, io.StringIO]:
    plan = StepPlan(
        mode=mode,
        nnodes=2,
        nproc_per_node=2,
        run_dir=tmp_path,
        script="t.py",
        hosts=("node1", "node2"),
    )
    (tmp_path / "logs").mkdir()
    console = io.StringIO()
    return StepSupervisor(plan, console), console


def _close(sup: StepSupervisor) -> None:
    for handle in sup._files.values():
        handle.close()


def test_torchrun_lines_go_to_rank_logs_with_node_rank_prefixes(tmp_path: Path) -> None:
    sup, console = _supervisor(tmp_path, LaunchMode.TORCHRUN)
    for line in ["0: [default1]:hello from 1", "1: [default0]:hello from 2", "1: agent says hi"]:
        sup.feed(line + "\n")
    _close(sup)
    assert console.getvalue().splitlines() == ["0:1| hello from 1", "1:2| hello from 2"]
    assert (tmp_path / "logs" / "rank1.log").read_text() == "hello from 1\n"
    assert (tmp_path / "logs" / "rank2.log").read_text() == "hello from 2\n"
    assert (tmp_path / "logs" / "node1.agent.log").read_text() == "agent says hi\n"


def test_srun_mode_task_is_the_rank(tmp_path: Path) -> None:
    sup, console = _supervisor(tmp_path, LaunchMode.SRUN)
    sup.feed("3: loss 0.5\n")
    sup.feed("srun: error: node2: task 3: Killed\n")
    _close(sup)
    assert console.getvalue().splitlines()[0] == "1:3| loss 0.5"
    failure = sup.diagnose(137)
    assert failure.summary == "rank 3 on node2 failed: Killed"
    assert failure.rank == 3


def test_the_killed_rank_is_named_not_the_peer_that_lost_it(tmp_path: Path) -> None:
    sup, _ = _supervisor(tmp_path, LaunchMode.TORCHRUN)
    for line in (PEER_ROOT_CAUSE + ROOT_CAUSE).splitlines():
        sup.feed(line + "\n")
    peer_error = {"rank": 1, "time": 1.0, "error": "RuntimeError: Connection closed by peer"}
    (tmp_path / "logs" / "rank1.error.json").write_text(json.dumps(peer_error))
    _close(sup)
    failure = sup.diagnose(1)
    assert failure.summary == "rank 3 (node 1 on node2, local rank 1) failed: killed by SIGKILL"


def test_a_primary_error_record_wins(tmp_path: Path) -> None:
    sup, _ = _supervisor(tmp_path, LaunchMode.TORCHRUN)
    for rank, when, error in [(0, 2.0, "ValueError: bad batch"), (2, 1.0, "KeyError: 'x'")]:
        record = {"rank": rank, "time": when, "error": error}
        (tmp_path / "logs" / f"rank{rank}.error.json").write_text(json.dumps(record))
    failure = sup.diagnose(1)
    assert failure.summary.startswith("rank 2 (node 1 on node2, local rank 0) failed first")
    assert "KeyError" in failure.summary


def test_the_node_entrypoint_message_is_passed_on(tmp_path: Path) -> None:
    sup, console = _supervisor(tmp_path, LaunchMode.TORCHRUN)
    sup.feed("1: noderun.node: error: could not check in; hint: x\n")
    sup.feed("0: noderun.node: error: 1/2 nodes checked in; never arrived: node 1; hint: y\n")
    _close(sup)
    assert "0:-| noderun.node: error: 1/2 nodes" in console.getvalue()
    assert sup.diagnose(1).summary.startswith("1/2 nodes checked in; never arrived: node 1")


def test_parse_scontrol_job_keeps_values_with_spaces() -> None:
    fields = parse_scontrol_job(
        "JobId=7 JobName=die JobState=FAILED Reason=NonZeroExitCode ExitCode=1:0 "
        "Command=/a b/job.sbatch WorkDir=/w NodeList=node[1-2]"
    )
    assert fields["JobState"] == "FAILED" and fields["Command"] == "/a b/job.sbatch"
    assert fields["NodeList"] == "node[1-2]"


@pytest.mark.parametrize(
    ("state", "code", "signal", "status", "shell"),
    [
        ("COMPLETED", 0, 0, "completed", 0),
        ("FAILED", 3, 0, "failed", 3),
        ("CANCELLED by 0", 0, 15, "cancelled", 143),
        ("TIMEOUT", 0, 0, "timeout", 1),
        ("RUNNING", None, None, "running", 1),
    ],
)
def test_job_states_map_to_run_statuses(
    state: str, code: int | None, signal: int | None, status: str, shell: int
) -> None:
    job = JobState("1", state, code, signal)
    assert job.status == status
    assert job.final == (status != "running")
    assert job.shell_exit_code == shell


def test_gpu_counts_from_gres() -> None:
    assert gpus_of_gres("(null)") == 0
    assert gpus_of_gres("gpu:4") == 4
    assert gpus_of_gres("gpu:a100:8(S:0-1),shard:2") == 8


def test_sacct_summary_says_when_accounting_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(slurm.shutil, "which", lambda _: None)
    note = slurm.sacct_summary("12", job_final=True)
    assert note == "accounting not available for job 12: `sacct` is not installed here\n"


def test_sacct_summary_when_accounting_storage_is_disabled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What `up.sh` without `-a` gives: sacct runs but refuses; scontrol still knows the job."""

    def fake_run(argv: list[str], timeout: float = 30) -> subprocess.CompletedProcess[str]:
        if argv[0] == "sacct":
            return subprocess.CompletedProcess(
                argv, 1, "", "sacct: error: Slurm accounting storage is disabled\n"
            )
        return subprocess.CompletedProcess(argv, 0, "JobId=12 JobState=COMPLETED ExitCode=0:0\n")

    monkeypatch.setattr(slurm, "_run", fake_run)
    note = slurm.sacct_summary("12", job_final=True)
    assert note.splitlines() == [
        "accounting not available for job 12: sacct: error: Slurm accounting storage is disabled",
        "scontrol says COMPLETED, exit code 0",
    ]
