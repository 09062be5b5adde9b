"""The check-in gate answers only its own job: a HELLO without the job's token is dropped and
logged; garbage, oversized and half-open connections never stop node 0's gate.

Seen failing before the token: a HELLO from another job (same port) was admitted as that
participant; an endless line without a newline was buffered whole."""

from __future__ import annotations

import socket
import threading
import time

from noderun.backends.node_gate import NodeGate, listen
from noderun.backends.ports import free_port
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
    assert time.monotonic() - started < 25  # each stranger costs at most the read timeout
    dropped = [line for line in log if "dropped a check-in" in line]
    assert len(dropped) == 2 and all("not this job's token" in line for line in dropped)
    half_open.close()
    oversized.close()
    listener.close()


def test_a_participant_with_another_token_never_gets_in() -> None:
    port = free_port()
    log: list[str] = []
    server = _gate(0, port, TOKEN, log)
    server.join_timeout = 3
    errors: list[BaseException] = []

    def serve() -> None:
        try:
            server.wait()
        except Exception as err:
            errors.append(err)

    thread = threading.Thread(target=serve)
    thread.start()
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
