"""The master probe's port answers only its own doctor: a stranger (another job's probe, garbage,
an endless line, a connection that says nothing) is dropped, counted and logged, and never
stops or stalls the job's probes.

Seen failing before: the port answered whoever connected and counted them, so two strangers
ended its service before the job's second probe came (that node then failed "master-reachable"
after the whole wait), and a wrong token was not even read."""

from __future__ import annotations

import os
import socket
import threading
import time

import pytest

from noderun.backends.ports import free_port
from noderun.doctor import probe
from noderun.doctor.checks import check_master_reachable, check_port
from tests.conftest import wait_until


def test_strangers_are_dropped_and_logged_and_the_probes_are_answered_at_once() -> None:
    port = free_port()
    listener = socket.create_server(("127.0.0.1", port))
    log: list[str] = []
    server = probe._Listener(listener, expected=2, token="t0k", log=log.append)
    serving = threading.Thread(target=server.serve, args=(time.monotonic() + 60,))
    serving.start()

    def stranger(data: bytes) -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", port))
        sock.sendall(data)
        return sock

    silent = [socket.create_connection(("127.0.0.1", port)) for _ in range(20)]  # half-open
    wrong = stranger(b"HELLO not-the-token\n")
    assert wrong.makefile().readline().strip() == probe.DENIED  # told, the token never shown
    strangers = [
        wrong,
        stranger(os.urandom(100) + b"\n"),
        stranger(b"x" * 65536),  # an endless line: never buffered past HELLO_LIMIT
        stranger(b"HELLO \xff\xfe\n"),  # not even text
    ]
    stranger(b"GET / HTTP/1.0").close()  # closed before its line ended
    assert wait_until(lambda: len(server.dropped) == 4, 10), server.dropped  # all but silent

    started = time.monotonic()
    deadline = started + 30
    first = probe.contact_master("127.0.0.1", port, deadline, "t0k")
    second = probe.contact_master("127.0.0.1", port, deadline, "t0k")
    serving.join(timeout=30)
    assert first["reachable"] and second["reachable"], (first, second)
    assert time.monotonic() - started < 3, "the probes waited behind the strangers"
    assert server.seen == ["127.0.0.1", "127.0.0.1"]  # only this job's probes counted
    whys = {why for _, why in server.dropped}
    assert "not this job's token" in whys and "not a doctor probe" in whys, whys
    assert f"sent more than {probe.HELLO_LIMIT} bytes without a line" in whys, whys
    assert "closed without a line" in whys, whys
    said = [line for line in log if "dropped a connection from 127.0.0.1" in line]
    assert len(said) == len(whys), log  # once per address and reason, the token never shown
    assert not any("t0k" in line or "not-the-token" in line for line in log), log
    for sock in silent + strangers:
        sock.close()

    # the doctor's table says it: a warning on the master's port-free check
    facts = {"is_master": True, "port": {"port": port, "free": True, "dropped": [
        {"from": a, "why": w, "count": n} for (a, w), n in server.dropped.most_common()
    ]}}  # fmt: skip
    check = check_port(facts, [])
    assert check.status.value == "WARN" and "not this job's token" in check.detail, check


def test_a_probe_of_another_job_hears_it_at_once() -> None:
    port = free_port()
    listener = socket.create_server(("127.0.0.1", port))
    server = probe._Listener(listener, expected=1, token="ours", log=lambda _: None)
    serving = threading.Thread(target=server.serve, args=(time.monotonic() + 10,))
    serving.start()
    started = time.monotonic()
    theirs = probe.contact_master("127.0.0.1", port, started + 10, "theirs")
    assert theirs["foreign"] and "another job's doctor" in theirs["error"], theirs
    check = check_master_reachable({"contact": theirs}, [])
    assert check.status.value == "FAIL" and "NODERUN_JOB_TOKEN" in check.fix, check
    assert time.monotonic() - started < 3
    assert probe.contact_master("127.0.0.1", port, started + 10, "ours")["reachable"]
    serving.join(timeout=10)


def test_a_silent_connection_is_dropped_after_the_hello_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(probe, "HELLO_TIMEOUT", 0.3)
    port = free_port()
    listener = socket.create_server(("127.0.0.1", port))
    server = probe._Listener(listener, expected=1, token="", log=lambda _: None)
    serving = threading.Thread(target=server.serve, args=(time.monotonic() + 10,))
    serving.start()
    with socket.create_connection(("127.0.0.1", port)) as silent:
        silent.settimeout(5)
        assert silent.recv(10) == b""  # closed by the probe's port, well before its wait
    # without a job token (nodes started by hand without one) any probe is answered
    assert probe.contact_master("127.0.0.1", port, time.monotonic() + 10, "")["reachable"]
    serving.join(timeout=10)
    assert ("127.0.0.1", "said nothing within 0.3 s") in server.dropped
