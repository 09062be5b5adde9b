"""Routing srun's labelled output to per-rank logs, naming the failure, parsing SLURM's answers.
Pure: recorded lines in, files and messages out."""

from __future__ import annotations

import io
import json
import subprocess
import threading
import time
from pathlib import Path

import pytest

from noderun.backends import slurm
from noderun.backends.slurm_step import StepSupervisor
from noderun.backends.slurm_text import JobState, gpus_of_gres, parse_scontrol_job
from noderun.plan.slurm import LaunchMode, StepPlan


def worker_failed(node: int, rank: int, local_rank: int, exit_code: int) -> str:
    """srun's line for torchrun's event of a failed worker (--event-log-handler=console), in
    the shape torch 2.13 prints it."""
    detail = {"group_world_size": 2, "entry_point": "python", "local_rank": [local_rank],
              "role_rank": [local_rank], "role_world_size": [2], "exit_code": [exit_code],
              "worker_pid": [9689]}  # fmt: skip
    fields = {"run_id": "7", "global_rank": rank, "group_rank": node, "worker_id": "9689",
              "role": "default", "hostname": f"node{node + 1}", "state": "FAILED",
              "total_run_time": 0, "rdzv_backend": "static", "raw_error": '{"message": "<NONE>"}',
              "metadata": json.dumps(detail), "agent_restarts": 0, "duration_ms": None}  # fmt: skip
    event = {"name": "torchelastic.worker.status.FAILED", "source": "WORKER", "timestamp": 0,
             "metadata": fields}  # fmt: skip
    return f"{node}: {json.dumps(event)}"


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
    sup.router.close()


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
    assert failure.summary == "rank 3 (node 1 on node2, local rank 1) failed: killed by SIGKILL"
    assert failure.rank == 3


def test_srun_mode_a_killed_task_beats_the_peer_srun_reported_first(tmp_path: Path) -> None:
    """A rank SIGKILLed in a submitted job: rank 0 lost its peer and srun reports it first."""
    sup, _ = _supervisor(tmp_path, LaunchMode.SRUN)
    sup.feed("0: RuntimeError: [pair.cc:534] Connection closed by peer [10.0.0.2]:4242\n")
    sup.feed("srun: error: node1: task 0: Exited with exit code 1\n")
    sup.feed("srun: error: node1: task 1: Killed\n")
    _close(sup)
    failure = sup.diagnose(137)
    assert failure.rank == 1, failure.summary
    assert failure.summary == "rank 1 (node 0 on node1, local rank 1) failed: killed by SIGKILL"


def test_torchrun_mode_every_failed_worker_is_weighed(tmp_path: Path) -> None:
    """torchrun's agent reports the peer first (it lost the connection); the kill is the cause."""
    sup, _ = _supervisor(tmp_path, LaunchMode.TORCHRUN)
    sup.feed("1: [default0]:RuntimeError: Connection closed by peer [10.0.0.1]:1\n")
    for line in (worker_failed(1, 2, 0, 1), worker_failed(1, 3, 1, -9)):
        sup.feed(line + "\n")
    _close(sup)
    failure = sup.diagnose(1)
    assert failure.rank == 3, failure.summary


def test_the_killed_rank_is_named_not_the_peer_that_lost_it(tmp_path: Path) -> None:
    sup, console = _supervisor(tmp_path, LaunchMode.TORCHRUN)
    for line in [
        worker_failed(0, 1, 1, 1),  # lost its peer: exit 1, and its record says so
        worker_failed(0, 0, 0, -15),  # stopped by its own agent after that
        worker_failed(1, 2, 0, -15),
        worker_failed(1, 3, 1, -9),  # the cause
        "1: Root Cause (first observed failure):",  # torchrun's own words are only logged
        "1:   rank      : 2 (local_rank: 0)",
    ]:
        sup.feed(line + "\n")
    peer_error = {"rank": 1, "time": 1.0, "error": "RuntimeError: Connection closed by peer"}
    (tmp_path / "logs" / "rank1.error.json").write_text(json.dumps(peer_error))
    _close(sup)
    failure = sup.diagnose(1)
    assert failure.summary == "rank 3 (node 1 on node2, local rank 1) failed: killed by SIGKILL"
    assert failure.exit_code == -9 and failure.rank == 3
    agent_log = (tmp_path / "logs" / "node1.agent.log").read_text()
    assert "Root Cause" in agent_log and "torchelastic.worker" not in agent_log
    assert console.getvalue() == ""


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


SACCT_HEADER = "JobID|JobName|State|ExitCode|Elapsed|NNodes|NodeList\n"


def _slow_sacct(settled_from: float, calls: list[tuple[float, int]]):  # type: ignore[no-untyped-def]
    """sacct as the lab's: ~0.09 s per ask; records final only for asks begun ``settled_from``
    s after the first ask. ``calls`` gets (start, asks in flight at the start) per ask."""
    lock = threading.Lock()
    state = {"first": 0.0, "flight": 0}

    def fake_run(argv: list[str], timeout: float = 30) -> subprocess.CompletedProcess[str]:
        assert argv[0] == "sacct"
        with lock:
            now = time.monotonic()
            state["first"] = state["first"] or now
            state["flight"] += 1
            calls.append((now - state["first"], state["flight"]))
        time.sleep(0.09)
        final = now - state["first"] >= settled_from
        with lock:
            state["flight"] -= 1
        done = "COMPLETED|0:0" if final else "RUNNING|0:0"
        rows = [f"7|job|{done}|00:00:03|2|node[1-2]", f"7.0|python|{done}|00:00:02|2|node[1-2]"]
        text = SACCT_HEADER + "\n".join(rows) + "\n"
        return subprocess.CompletedProcess(argv, 0, text, "")

    return fake_run


def test_sacct_asks_overlap_and_the_first_settled_answer_wins(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[tuple[float, int]] = []
    monkeypatch.setattr(slurm, "_run", _slow_sacct(0.05, calls))
    note = slurm.sacct_summary("7", job_final=True)
    assert note.startswith("sacct for job 7\n"), note  # settled: no "still arriving" note
    assert "COMPLETED" in note and "RUNNING" not in note
    # asks overlapped (a serial ask would have waited for the first one's 0.09 s) and never
    # more than SACCT_IN_FLIGHT at once; the winner was one begun after records settled
    assert max(flight for _, flight in calls) >= 2
    assert max(flight for _, flight in calls) <= slurm.SACCT_IN_FLIGHT
    assert any(start >= 0.05 for start, _ in calls)
    assert sorted(calls) == calls


def test_sacct_never_settling_gives_the_newest_rows_with_a_note(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[tuple[float, int]] = []
    monkeypatch.setattr(slurm, "_run", _slow_sacct(1e9, calls))
    note = slurm.sacct_summary("7", job_final=True, timeout=0.4)
    assert note.startswith("sacct for job 7 (some records were still arriving)\n"), note
    assert "RUNNING" in note
    assert len(calls) >= 3 and max(flight for _, flight in calls) <= slurm.SACCT_IN_FLIGHT


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


# srun 22.05's lines when node 1's slurmd and slurmstepd were SIGKILLed mid-step (seen on the
# lab, tests/slurm/test_node_lost.py): node 0's rank lost its peer, srun waited --wait=30 s
# for task 1, then gave up on the step
LOST_NODE_LINES = [
    "srun: error: node1: task 0: Exited with exit code 1",
    "srun: launch/slurm: _step_signal: Terminating StepId=4.0",
    "srun: First task exited 30s ago",
    "srun: StepId=4.0 task 1: running",
    "srun: StepId=4.0 task 0: exited abnormally",
    "srun: launch/slurm: _step_signal: Terminating StepId=4.0",
    "srun: Job step aborted: Waiting up to 7 seconds for job step to finish.",
    "srun: error: Timed out waiting for job step to complete",
]


@pytest.mark.parametrize("mode", [LaunchMode.TORCHRUN, LaunchMode.SRUN])
def test_a_node_whose_tasks_never_ended_is_named_lost_not_its_peer(
    tmp_path: Path, mode: LaunchMode
) -> None:
    sup, _ = _supervisor(tmp_path, mode)
    sup.feed("0: [rank0]: RuntimeError: [pair.cc:537] Read error: Connection reset by peer\n")
    lines = LOST_NODE_LINES
    if mode is LaunchMode.SRUN:  # tasks are ranks: node 1 holds ranks 2 and 3
        lines = [line.replace("task 1: running", "tasks 2-3: running") for line in lines]
    for line in lines:
        sup.feed(line + "\n")
    _close(sup)
    failure = sup.diagnose(1)
    assert failure.node_rank == 1 and failure.host == "node2", failure
    assert failure.summary.startswith("node 1 on node2 was lost: its tasks never ended"), failure
    assert "sinfo -n node2" in failure.summary and "--resume auto" in failure.summary


def test_slurms_node_failure_line_names_the_node(tmp_path: Path) -> None:
    sup, _ = _supervisor(tmp_path, LaunchMode.TORCHRUN)
    for line in ["srun: error: Node failure on node2", "srun: error: node1: task 0: Killed"]:
        sup.feed(line + "\n")
    _close(sup)
    failure = sup.diagnose(1)
    assert failure.summary.startswith("node 1 on node2 was lost: Slurm reported a node failure")


def test_a_task_srun_saw_running_is_no_loss_when_the_step_ended(tmp_path: Path) -> None:
    """A slow task that ended within srun's kill wait is not a lost node: the peer is named."""
    sup, _ = _supervisor(tmp_path, LaunchMode.TORCHRUN)
    for line in LOST_NODE_LINES[:5]:
        sup.feed(line + "\n")
    _close(sup)
    assert sup.diagnose(1).summary == "node 0 on node1 failed: Exited with exit code 1"
