"""The Backend protocol as ``supervise`` drives it: start, wait, cancel from a signal or the stall
watch it owns, and what a backend tells about a live run. In-process, no ranks started."""

from __future__ import annotations

import os
import signal
import socket
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from noderun import timeline
from noderun.backends import stall
from noderun.backends.local import LocalBackend
from noderun.backends.result import Failure, Result
from noderun.backends.slurm_step import StepBackend
from noderun.backends.ssh import SshBackend
from noderun.backends.supervise import RankPlace, rank_places, run_once
from noderun.exit_codes import EXIT_STALLED
from noderun.plan.launch import Gang, NodeCommand, plan_hand_started, plan_local
from noderun.plan.slurm import LaunchMode, StepPlan
from noderun.plan.stall import OnStall, StallPolicy
from noderun.stacks import Snapshot


class FakeGang:
    """A backend whose gang never ends by itself: ``wait`` returns once it was cancelled, as a
    failure the cancel caused (which the supervisor must not report)."""

    def __init__(self, run_dir: Path, in_start: Callable[[], None] = lambda: None) -> None:
        self.run_dir = run_dir
        self.in_start = in_start
        self.cancels = 0
        self.on_output: Callable[[], None] | None = None

    def ranks(self) -> list[RankPlace]:
        return rank_places(self.hosts(), 2)

    def hosts(self) -> list[str]:
        return ["here"]

    def roots(self) -> list[int]:
        return []

    def srun_job(self) -> None:
        return None

    def start(self, on_output: Callable[[], None] | None = None) -> None:
        self.on_output = on_output
        self.in_start()

    def cancel(self) -> None:
        self.cancels += 1

    def wait(self, on_end: Callable[[], None] | None = None) -> Result:
        if self.on_output:
            self.on_output()  # a rank's line: the stall clock starts
        deadline = time.monotonic() + 20
        while not self.cancels and time.monotonic() < deadline:
            time.sleep(0.01)
        if on_end:
            on_end()
        return Result(exit_code=1, failure=Failure(node_rank=0, rank=1, exit_code=-15))


def _stages(run_dir: Path) -> list[str]:
    return [row["stage"] for row in timeline.gather(run_dir)]


def test_sigterm_cancels_the_gang_and_the_run_ends_interrupted(tmp_path: Path) -> None:
    before = signal.getsignal(signal.SIGTERM)
    gang = FakeGang(tmp_path)
    gang.in_start = lambda: os.kill(os.getpid(), signal.SIGTERM)  # while it starts
    result = run_once(gang, None)
    assert gang.cancels == 2  # by the handler, and again once start() returned
    assert (result.interrupted_by, result.exit_code, result.failure) == ("SIGTERM", 143, None)
    assert signal.getsignal(signal.SIGTERM) is before
    assert _stages(tmp_path) == ["step_started", "step_ended"]


def test_a_stall_with_kill_cancels_the_gang_and_the_run_ends_stalled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(stall.StallWatcher, "take", lambda self: Snapshot((), self.world_size))
    gang = FakeGang(tmp_path)
    result = run_once(gang, StallPolicy(0.2, OnStall.KILL))
    assert gang.cancels == 1 and result.exit_code == EXIT_STALLED and result.failure is None
    assert result.stalled is not None and result.stalled.endswith(".txt")
    (report,) = tmp_path.glob("stall-*.txt")
    assert f"report {report}" in result.stalled and "world size 2" in report.read_text()
    assert "stopping the job (--on-stall=kill)" in capsys.readouterr().err


def _gang(tmp_path: Path, nnodes: int = 2) -> Gang:
    return Gang(nnodes=nnodes, nproc_per_node=2, master_addr="127.0.0.1", master_port=29500,
                run_dir=tmp_path, script="train.py")  # fmt: skip


def test_simulated_nodes_tell_ranks_hosts_and_logs(tmp_path: Path) -> None:
    backend = LocalBackend(plan_local(_gang(tmp_path)), ["noderun", "run"])
    me = socket.gethostname()
    assert backend.hosts() == [me, me] == backend.describe().hosts
    assert backend.ranks()[3] == RankPlace(rank=3, node=1, local_rank=1, host=me)
    logs = tmp_path / "logs"
    assert backend.log_files() == [
        *(logs / f"rank{r}.log" for r in range(4)), logs / "node0.agent.log",
        logs / "node1.agent.log",
    ]  # fmt: skip
    assert backend.roots() == [] and backend.srun_job() is None  # nothing started yet


def test_a_hand_started_node_tells_the_whole_world_but_its_own_agent(tmp_path: Path) -> None:
    plan = plan_hand_started(
        _gang(tmp_path, nnodes=3), node_rank=1, join_timeout=60, host="b", env=None
    )
    backend = LocalBackend(plan, [])
    assert [r.rank for r in backend.ranks()] == list(range(6))
    assert backend.log_files()[6:] == [tmp_path / "logs" / "node1.agent.log"]


def test_ssh_nodes_tell_their_hosts(tmp_path: Path) -> None:
    nodes = [NodeCommand(n, host, ("true",), {}, remote=True) for n, host in enumerate("ab")]
    backend = SshBackend(_gang(tmp_path).plan(nodes), [])
    assert backend.hosts() == ["a", "b"] == backend.describe().hosts
    assert [(r.rank, r.host) for r in backend.ranks()] == [(0, "a"), (1, "a"), (2, "b"), (3, "b")]


@pytest.mark.parametrize(
    ("mode", "direct", "own", "job"),
    [
        (LaunchMode.SRUN, False, ["srun.log"], "77"),
        (LaunchMode.TORCHRUN, False, ["srun.log", "node0.agent.log", "node1.agent.log"], "77"),
        (LaunchMode.TORCHRUN, True, ["node0.agent.log"], None),  # torchrun on this node
    ],
)
def test_a_slurm_step_tells_its_nodes_logs_and_job(
    tmp_path: Path, mode: LaunchMode, direct: bool, own: list[str], job: str | None
) -> None:
    step = StepPlan(mode=mode, nnodes=2, nproc_per_node=2, run_dir=tmp_path, script="t.py",
                    hosts=("node1", "node2"))  # fmt: skip
    backend = StepBackend(step, "77", [], direct=direct)
    assert backend.hosts() == ["node1", "node2"]
    assert [(r.rank, r.node, r.local_rank, r.host) for r in backend.ranks()][1:3] == [
        (1, 0, 1, "node1"), (2, 1, 0, "node2"),
    ]  # fmt: skip
    logs = tmp_path / "logs"
    assert backend.log_files() == [*(logs / f"rank{r}.log" for r in range(4)),
                                   *(logs / name for name in own)]  # fmt: skip
    assert backend.srun_job() == job and backend.roots() == []
    backend.cancel()  # before start: nothing to stop yet


def test_a_direct_torchrun_step_keeps_the_python_and_agent_options(tmp_path: Path) -> None:
    """One node in torchrun mode runs torchrun here, without srun: the user's ``--python`` and
    torchrun agent options reach that agent as they reach srun's (they were dropped once)."""
    step = StepPlan(mode=LaunchMode.TORCHRUN, nnodes=1, nproc_per_node=2, run_dir=tmp_path,
                    script="t.py", python="/opt/py/bin/python3",
                    agent_flags=("--monitor-interval", "0.5"), direct=True)  # fmt: skip
    argv = StepBackend(step, "77", []).direct_gang().agent_argv(0)
    assert argv[0] == "/opt/py/bin/python3"
    assert argv[argv.index("--monitor-interval") + 1] == "0.5"
