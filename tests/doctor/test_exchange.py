"""Doctor on nodes started by hand: facts go to node 0 and come back whole to every node; a
node that never reports is named; bad flags are one line."""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

from noderun.backends.ports import free_port
from noderun.doctor import exchange
from tests.conftest import noderun


def test_every_reporting_node_gets_every_nodes_facts_and_the_absent_are_left_out() -> None:
    port = free_port()
    listener = exchange.listen(port)
    got: dict[int, dict] = {}
    reporter = threading.Thread(
        target=lambda: got.update(exchange.report("127.0.0.1", port, 1, {"host": "b"}, 30)),
    )
    reporter.start()  # before node 0 gathers: its report waits in the backlog
    with listener:
        gathered = exchange.gather(listener, 3, {"host": "a"}, wait=1.5)  # node 2 never comes
    reporter.join(timeout=30)
    assert gathered == {0: {"host": "a"}, 1: {"host": "b"}}
    assert got == gathered


def test_a_node_whose_master_never_answers_keeps_its_own_facts() -> None:
    alone = exchange.report("127.0.0.1", free_port(), 1, {"host": "b"}, wait=0.5)
    assert alone == {1: {"host": "b"}}


def test_a_hand_started_doctor_without_its_flags_is_one_line() -> None:
    for args in (["--node-rank", "0"], ["--nnodes", "2", "--node-rank", "2", "--master-addr", "x"]):
        done = noderun(["doctor", *args])
        assert done.returncode == 2, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and "hint:" in lines[0], lines


def test_strangers_and_silent_connections_never_stop_node_0() -> None:
    """A report without the job's token is dropped, told and logged; 30 connections that say
    nothing and one that sends garbage without a line are read side by side with the real
    report, which gets through at once (one after the other, they held node 0 for 30 x
    READ_TIMEOUT)."""
    import socket
    import time

    port = free_port()
    listener = exchange.listen(port)
    log: list[str] = []
    silent = [socket.create_connection(("127.0.0.1", port)) for _ in range(30)]
    stranger = socket.create_connection(("127.0.0.1", port))
    stranger.sendall(b"HELLO no\n")
    garbage = socket.create_connection(("127.0.0.1", port))
    garbage.sendall(b"x" * 100_000)  # no line: dropped after HELLO_LIMIT bytes
    got: dict[int, dict] = {}
    reporter = threading.Thread(
        target=lambda: got.update(
            exchange.report("127.0.0.1", port, 1, {"host": "b"}, 60, token="t0k")
        ),
    )
    reporter.start()
    started = time.monotonic()
    with listener:
        gathered = exchange.gather(listener, 2, {"host": "a"}, wait=60, token="t0k", log=log.append)
    reporter.join(timeout=30)
    assert gathered == {0: {"host": "a"}, 1: {"host": "b"}} == got
    # the 30 silent connections were read side by side: none of them held the real report
    assert time.monotonic() - started < exchange.READ_TIMEOUT + 10
    assert stranger.recv(100).startswith(b"DENIED"), "the stranger is told, not hung"
    assert any("not this job's token" in line for line in log), log
    assert any("without a line" in line or "more than" in line for line in log), log
    for conn in [*silent, stranger, garbage]:
        conn.close()


def test_the_doctor_in_an_allocation_gives_its_probes_a_job_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Inside salloc (no token from noderun submit) the probes' step still gets one, in its
    environment (never its command line), so the master probe's port drops other jobs'
    probes. The steps are started by the launch backend (srun itself replaced by `false`)."""
    from noderun.backends import slurm, slurm_step
    from noderun.doctor import runner

    seen: list[tuple[list[str], dict[str, str]]] = []
    popen = subprocess.Popen

    def srun(argv: list[str], **options: Any) -> subprocess.Popen[str]:
        seen.append((list(argv), dict(options["env"])))
        return popen(["false"], **options)

    monkeypatch.setattr(slurm, "require_command", lambda _name: None)
    monkeypatch.setattr(slurm, "hostnames", lambda _nodes: ["node1", "node2"])  # no scontrol
    monkeypatch.setattr(slurm_step.subprocess, "Popen", srun)
    monkeypatch.delenv("NODERUN__JOB_TOKEN", raising=False)
    environ = {"SLURM_JOB_ID": "77", "SLURM_JOB_NODELIST": "node[1-2]", "PATH": "/usr/bin"}
    result = runner.run_in_allocation(tmp_path, 1, environ)
    # a node without facts says how the probes' step ended, as the backend tells it
    probe = {(c.node, c.check.name): c.check for c in result.checks}[("node2", "probe")]
    assert "no answer from this node (srun ended with exit code 1" in probe.detail, probe
    argv, env = seen[0]
    assert argv[0] == "srun" and "noderun.doctor.probe" in argv, argv
    token = env.get("NODERUN__JOB_TOKEN", "")
    assert len(token) == 32 and not [word for word in argv if token in word]
    monkeypatch.setenv("NODERUN__JOB_TOKEN", "f00d" * 8)  # noderun submit's stays
    runner.run_in_allocation(tmp_path, 1, environ)
    assert "noderun.doctor.probe" in seen[2][0] and seen[2][1]["NODERUN__JOB_TOKEN"] == "f00d" * 8
