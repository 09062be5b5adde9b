"""The check-in gate answers only its own job: a HELLO without the job's token is dropped and
logged; garbage, oversized and half-open connections never stop node 0's gate.

Seen failing before the token: a HELLO from another job (same port) was admitted as that
participant; an endless line without a newline was buffered whole."""

from __future__ import annotations

import contextlib
import socket
import threading
import time

import pytest

from noderun.backends.node_gate import GateError, NodeGate, listen
from noderun.backends.ports import free_port
from noderun.errors import UsageError
from noderun.topology.contract import RankContract, job_token

TOKEN = "5ec7e7"


def _gate(index: int, port: int, token: str, log: list[str] | None = None) -> NodeGate:
    return NodeGate(
        index=index,
        total=2,
        addr="127.0.0.1",
        port=port,
        host=f"host{index}",
        join_timeout=30,
        describe=lambda i: f"node {i}",
        token=token,
        log=(log.append if log is not None else None),
    )


def _wait_quietly(gate: NodeGate) -> None:
    with contextlib.suppress(GateError):
        gate.wait()


def _serving(server: NodeGate) -> tuple[threading.Thread, list[BaseException]]:
    """Node 0's gate waiting in a thread; what it raised lands in the list."""
    errors: list[BaseException] = []

    def serve() -> None:
        try:
            server.wait()
        except Exception as err:
            errors.append(err)

    thread = threading.Thread(target=serve)
    thread.start()
    return thread, errors


def _send(port: int, data: bytes, close: bool = True) -> socket.socket:
    conn = socket.create_connection(("127.0.0.1", port), timeout=5)
    if data:
        conn.sendall(data)
    if close:
        conn.close()
    return conn


def test_strangers_are_dropped_and_the_job_still_meets() -> None:
    port = free_port()
    listener = listen(port, "127.0.0.1")
    log: list[str] = []
    server = _gate(0, port, TOKEN, log)
    server.listener = listener
    done: list[object] = []
    thread = threading.Thread(target=lambda: done.append(server.wait() or "ok"))
    thread.start()
    half_open = _send(port, b"", close=False)  # connects, says nothing, stays
    _send(port, b"\x00\xff garbage \x13\n")
    oversized = _send(port, b"HELLO 1 " + b"x" * 200_000, close=False)  # no newline, endless
    _send(port, b"HELLO 1 intruder\n")  # no token: another job, or a scanner
    _send(port, b"HELLO 1 intruder wrong\n")
    started = time.monotonic()
    _gate(1, port, TOKEN).wait()  # the real participant still gets in
    thread.join(30)
    assert done == ["ok"]
    assert time.monotonic() - started < 5  # read side by side: no stranger holds the gate
    dropped = [line for line in log if "dropped a check-in" in line]
    assert len(dropped) == 2 and all("not this job's token" in line for line in dropped)
    half_open.close()
    oversized.close()
    listener.close()


def test_many_silent_connections_never_stall_the_gate() -> None:
    """Connections are read side by side: 200 that say nothing, opened first, do not hold the
    participant behind them (read one after the other, they held the gate 5 s each: 1000 s,
    past any join timeout). Each is closed after the read timeout."""
    port = free_port()
    listener = listen(port, "127.0.0.1", backlog=256)
    server = _gate(0, port, TOKEN, [])
    server.listener = listener
    thread, errors = _serving(server)
    silent = [_send(port, b"", close=False) for _ in range(200)]
    started = time.monotonic()
    _gate(1, port, TOKEN).wait()
    thread.join(30)
    assert not errors and not thread.is_alive(), errors
    assert time.monotonic() - started < 5, "the gate stalled behind the silent connections"
    for conn in silent:
        conn.close()
    listener.close()


def test_a_participant_with_another_token_never_gets_in() -> None:
    port = free_port()
    log: list[str] = []
    server = _gate(0, port, TOKEN, log)
    server.join_timeout = 3
    thread, errors = _serving(server)
    time.sleep(0.2)
    other = _gate(1, port, "another-job")
    other.join_timeout = 2
    try:
        other.wait()
    except Exception as err:
        errors.append(err)
    thread.join(20)
    assert len(errors) == 2  # the gate timed out naming node 1; node 1 never got a GO
    assert "never arrived: node 1" in str(errors[0]) + str(errors[1])
    assert any("not this job's token" in line for line in log)


def test_the_token_is_part_of_the_rank_contract() -> None:
    env = job_token({})
    contract = RankContract.from_env(env)
    assert contract.job_token and len(contract.job_token) == 32
    assert job_token(env) == {}  # a job that has one keeps it
    assert RankContract(job_token="t").to_env() == {"NODERUN__JOB_TOKEN": "t"}


def test_a_hand_started_node_without_node_0s_token_is_told_at_once_which_variable() -> None:
    """Nodes started by hand (``--node-rank``) share a token only through NODERUN_JOB_TOKEN:
    node 1 without it (or with another) hears at once, in one line naming the variable and the
    fix (a usage error: exit 2); node 0 names it among the nodes that never arrived, and logs
    the drop once, not once per retry. Seen before: node 1 said "the master closed the
    connection; hint: node 0 was never started", and node 0 logged 14 drops in 8 s."""
    port = free_port()
    log: list[str] = []
    server = _gate(0, port, TOKEN, log)
    server.join_timeout, server.by_hand = 1.2, True
    thread, errors = _serving(server)
    for token in ("", "another"):
        node = _gate(1, port, token)
        node.by_hand = True
        started = time.monotonic()
        with pytest.raises(UsageError) as refused:
            node.wait()
        assert time.monotonic() - started < 1.5, "told only at the join timeout"
        said = str(refused.value)
        assert "turned node 1 on host1 away" in said and "NODERUN_JOB_TOKEN" in said, said
        assert refused.value.hint and "the same NODERUN_JOB_TOKEN on every machine" in (
            refused.value.hint
        )
    for _ in range(3):  # the same stranger again: logged once
        with pytest.raises(UsageError):
            node.wait()
    thread.join(20)
    assert len(errors) == 1 and "never arrived: node 1" in str(errors[0])
    assert "turned away (not this job's token): node 1 from host1" in str(errors[0]), errors
    assert "NODERUN_JOB_TOKEN" in str(errors[0].hint)  # type: ignore[attr-defined]
    assert len([line for line in log if "dropped a check-in" in line]) == 2, log


def test_a_participant_under_srun_turned_away_keeps_trying_and_says_why() -> None:
    """Not by hand (srun's nodes share the token): a wrong token is another job's gate on
    this port, so the node keeps trying until its join timeout, then names the refusal."""
    port = free_port()
    server = _gate(0, port, TOKEN)
    server.join_timeout = 1.5
    thread = threading.Thread(target=_wait_quietly, args=(server,))
    thread.start()
    node = _gate(1, port, "another-job")
    node.join_timeout = 1
    with pytest.raises(GateError) as ended:
        node.wait()
    assert "turned node 1 on host1 away" in str(ended.value), ended.value
    thread.join(20)
