"""The per-node entrypoint and its check-in gate, without the lab: fake step variables and
real sockets on this machine."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from noderun.backends import node_entry as node
from noderun.backends.node_gate import GateError, NodeGate, listen
from noderun.backends.ports import free_port
from noderun.errors import NoderunError, TopologyError, UsageError
from noderun.plan.launch import RANK_ENTRY, Entry
from noderun.plan.slurm import LaunchMode
from noderun.topology import port_for_job

STEP = {
    "SLURM_JOB_ID": "4242",
    "SLURM_STEP_ID": "0",
    "SLURM_STEP_NODELIST": "gpu-a[001-002]",
    "SLURM_JOB_NODELIST": "gpu-a[001-002]",
    "SLURM_STEP_NUM_NODES": "2",
    "SLURM_STEP_TASKS_PER_NODE": "1(x2)",
    "SLURM_NODEID": "1",
    "SLURM_PROCID": "1",
    "SLURM_LOCALID": "0",
}


def _resolve(argv: list[str], environ: dict[str, str]) -> node.NodeSpec:
    options, _ = node.split_command([*argv, "--", "train.py"])
    return node.resolve(node._parser().parse_args(options), environ)


def test_split_command_leaves_the_script_part_untouched() -> None:
    opts, command = node.split_command(["--nproc-per-node=2", "--", "t.py", "--", "-x", ""])
    assert opts == ["--nproc-per-node=2"]
    assert command == ["t.py", "--", "-x", ""]
    with pytest.raises(UsageError):
        node.split_command(["--nproc-per-node=2"])


def test_torchrun_mode_from_step_variables() -> None:
    spec = _resolve(["--nproc-per-node=2", "--run-dir=/tmp/r"], STEP)
    assert (spec.node_rank, spec.nnodes, spec.index) == (1, 2, 1)
    assert spec.hosts == ("gpu-a001", "gpu-a002")
    assert spec.master_addr == "gpu-a001"
    assert spec.master_port == port_for_job("4242")
    assert spec.describe(1) == "node 1 (gpu-a002, ranks 2-3)"
    argv = node.exec_argv(spec, ["train.py", "a b", "--nnodes=9"], "/py")
    assert argv[:3] == ["/py", "-m", "torch.distributed.run"]
    assert "--node-rank=1" in argv and "--master-addr=gpu-a001" in argv
    assert "--rdzv-conf=timeout=20" in argv
    assert argv[-3:] == ["train.py", "a b", "--nnodes=9"]
    assert "bash" not in argv


def test_srun_mode_sets_the_rank_contract() -> None:
    step = {**STEP, "SLURM_STEP_TASKS_PER_NODE": "2(x2)", "SLURM_PROCID": "3", "SLURM_LOCALID": "1"}
    spec = _resolve(["--mode=srun", "--nproc-per-node=2", "--master-port=29999"], step)
    assert spec.mode is LaunchMode.SRUN and spec.index == 3
    env = node.exec_env(spec, {"KEEP": "1"})
    assert {k: env[k] for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE")} == {
        "RANK": "3",
        "LOCAL_RANK": "1",
        "WORLD_SIZE": "4",
        "LOCAL_WORLD_SIZE": "2",
    }
    assert (env["MASTER_ADDR"], env["MASTER_PORT"], env["KEEP"]) == ("gpu-a001", "29999", "1")
    # every rank starts through the rank entry (the script as __main__, then os._exit)
    assert node.exec_argv(spec, ["t.py", "x"], "/py") == ["/py", RANK_ENTRY, "t.py", "x"]
    assert spec.describe(3) == "rank 3 (gpu-a002)"
    # node 0's task serves the store: every rank, rank 0 too, is its client (torchrun's names)
    assert (env["TORCHELASTIC_USE_AGENT_STORE"], env["TORCHELASTIC_RESTART_COUNT"]) == ("True", "0")
    assert (
        node.exec_env(spec, {"TORCHELASTIC_RESTART_COUNT": "2"})["TORCHELASTIC_RESTART_COUNT"]
        == "2"
    )
    off = node.exec_env(spec, {"NODERUN_AGENT_STORE": "0"})
    assert "TORCHELASTIC_USE_AGENT_STORE" not in off and not node.hosts_store(spec, off)
    # every torch takes the same path; an executable rank has no Python to serve the store
    assert node.hosts_store(spec, {})
    assert not node.hosts_store(spec, {}, Entry.EXECUTABLE)


def test_torchrun_mode_leaves_the_store_to_torchrun() -> None:
    spec = _resolve(["--nproc-per-node=2"], STEP)
    assert not node.hosts_store(spec, {})
    assert "TORCHELASTIC_USE_AGENT_STORE" not in node.exec_env(spec, {})


@pytest.mark.parametrize(
    ("argv", "environ", "error", "words"),
    [
        (["--nproc-per-node=2"], {"SLURM_JOB_ID": "1"}, UsageError, ["not running inside an srun"]),
        (
            ["--nproc-per-node=2"],
            {**STEP, "SLURM_STEP_TASKS_PER_NODE": "2(x2)"},
            UsageError,
            ["2 noderun.node task(s) on gpu-a002", "--ntasks-per-node=1"],
        ),
        (["--nproc-per-node=2", "--node-rank=5"], STEP, TopologyError, ["node rank 5"]),
        (
            ["--nproc-per-node=2"],
            {k: v for k, v in STEP.items() if k != "SLURM_JOB_ID"},
            UsageError,
            ["MASTER_PORT", "--master-port"],
        ),
    ],
    ids=["no-step", "two-tasks-per-node", "node-rank-range", "no-job-id"],
)
def test_bad_environments_are_named(
    argv: list[str], environ: dict[str, str], error: type[NoderunError], words: list[str]
) -> None:
    with pytest.raises(error) as caught:
        _resolve(argv, environ)
    for word in words:
        assert word in str(caught.value)
    assert "hint:" in str(caught.value)


def test_master_address_checks() -> None:
    spec = _resolve(["--nproc-per-node=1", "--master-addr=no-such-host.invalid"], STEP)
    with pytest.raises(TopologyError, match="does not resolve"):
        node.check_master(spec, "gpu-a002")
    spec0 = _resolve(["--nproc-per-node=1", "--node-rank=0", "--master-addr=192.0.2.7"], STEP)
    with pytest.raises(TopologyError, match="not an address of node 0"):
        node.check_master(spec0, socket.gethostname())
    local = _resolve(["--nproc-per-node=1", "--node-rank=0", "--master-addr=127.0.0.1"], STEP)
    node.check_master(local, socket.gethostname())


def _gate(index: int, total: int, port: int, timeout: float) -> NodeGate:
    return NodeGate(
        index=index,
        total=total,
        addr="127.0.0.1",
        port=port,
        host=f"host{index}",
        join_timeout=timeout,
        describe=lambda i: f"node {i} (host{i})",
    )


def _run_gates(indices: list[int], total: int, port: int, timeout: float) -> dict[int, object]:
    results: dict[int, object] = {}

    def one(i: int) -> None:
        try:
            _gate(i, total, port, timeout).wait()
            results[i] = "ok"
        except NoderunError as err:
            results[i] = err

    threads = [threading.Thread(target=one, args=(i,)) for i in indices]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout + 15)
    return results


def test_gate_passes_when_everyone_arrives_and_frees_the_port() -> None:
    port = free_port()
    assert _run_gates([2, 0, 1], 3, port, 10) == {0: "ok", 1: "ok", 2: "ok"}
    with socket.socket() as again:  # torch's store must be able to listen there next
        again.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        again.bind(("", port))


def test_a_gate_given_a_listener_leaves_it_listening() -> None:
    """Node 0 of an srun-mode step keeps the port from the check-in to the store host: no
    moment where another program could take it or a rank be refused."""
    port = free_port()
    listener = listen(port, "host0")
    gates = [_gate(0, 2, port, 10), _gate(1, 2, port, 10)]
    gates[0].listener = listener
    threads = [threading.Thread(target=gate.wait) for gate in gates]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    try:
        assert listener.fileno() != -1
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass  # still accepted by the kernel: the port listens
    finally:
        listener.close()


def test_gate_names_who_never_arrived_within_the_timeout() -> None:
    start = time.monotonic()
    results = _run_gates([0, 1], 3, free_port(), 2)
    assert time.monotonic() - start < 10
    for i in (0, 1):
        assert isinstance(results[i], GateError)
        assert "2/3 nodes checked in" in str(results[i])
        assert "never arrived: node 2 (host2)" in str(results[i])


def test_gate_client_without_master_says_so() -> None:
    results = _run_gates([1], 2, free_port(), 1)
    assert isinstance(results[1], GateError)
    assert "could not check in with the master at 127.0.0.1" in str(results[1])


def test_gate_refuses_a_busy_port() -> None:
    with socket.socket() as busy:
        busy.bind(("", 0))
        busy.listen()
        with pytest.raises(UsageError, match="already in use"):
            _gate(0, 2, busy.getsockname()[1], 1).wait()


def test_hostnames_falls_back_to_the_parser(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("noderun.backends.slurm.shutil.which", lambda _: None)
    assert node.hostnames("gpu-a[001-002,010],gpu-b7") == [
        "gpu-a001",
        "gpu-a002",
        "gpu-a010",
        "gpu-b7",
    ]


def test_run_dir_is_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    spec = _resolve(["--nproc-per-node=1", "--run-dir=runs/x"], STEP)
    assert spec.run_dir == tmp_path / "runs" / "x"


@pytest.mark.parametrize(("switch", "seen"), [(None, "True"), ("0", "None")], ids=["on", "off"])
def test_a_rank_run_in_place_gets_the_store_decision_of_its_environment(
    tmp_path: Path, switch: str | None, seen: str
) -> None:
    """srun mode's node entry becomes the rank in its own process: the rank's variables follow
    NODERUN_AGENT_STORE as the store host does (off: rank 0 must serve the store itself)."""
    script = tmp_path / "show.py"
    script.write_text("import os\nprint('AGENT', os.environ.get('TORCHELASTIC_USE_AGENT_STORE'))\n")
    step = {
        **STEP,
        "SLURM_STEP_NODELIST": "localhost",
        "SLURM_JOB_NODELIST": "localhost",
        "SLURM_STEP_NUM_NODES": "1",
        "SLURM_STEP_TASKS_PER_NODE": "1",
        "SLURM_NODEID": "0",
        "SLURM_PROCID": "0",
    }
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "NODERUN_"))}
    env.update(step, **({"NODERUN_AGENT_STORE": switch} if switch else {}))
    result = subprocess.run(
        [sys.executable, "-m", "noderun.node", "--mode=srun", "--nproc-per-node=1",
         "--master-addr=127.0.0.1", f"--master-port={free_port()}", f"--run-dir={tmp_path}",
         "--", str(script)],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert f"AGENT {seen}" in result.stdout.splitlines()
