"""Hand-started nodes: every node's probe facts to node 0 and the whole set back to every node.

``noderun doctor --nnodes N --node-rank R --master-addr A`` runs on each machine (seed 001:
no scheduler, nobody to start the probes together). Each node probes itself; node 0 then
listens on the port after the master port, each other node says ``HELLO <job token>``, sends
its facts as one JSON line and gets every node's facts back, so every node prints the same
table. Node 0 answers when all N reported or when ``wait`` runs out; the nodes that never came
are named. The hellos are read side by side (``first_lines``), a few hundred bytes each: a
stranger, a silent or a half-open connection never holds node 0, and only a node that knows
the token gets to send its (larger) facts line.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import os
import socket
import sys
import time
from collections.abc import Callable
from typing import Any

from noderun.first_lines import FirstLines, peer
from noderun.topology.contract import RankContract

Facts = dict[str, Any]
LIMIT = 64 << 20  # bytes of one node's facts line (read only after its hello passed)
HELLO_LIMIT = 256  # bytes of a hello line (the token and a little more)
READ_TIMEOUT = 5.0  # a node sends its lines at once: a silent connection is not one of ours
WELCOME = b"OK\n"  # the hello passed: send the facts
DENIED = b"DENIED not this job's token\n"


def exchange_port(master_port: int) -> int:
    """Node 0 gathers facts here (the master port itself is the probe's)."""
    return master_port + 1 if master_port < 65535 else master_port - 1


def _token() -> str:
    """The job token every machine was given (``NODERUN_JOB_TOKEN``, the same on each), or ''."""
    return RankContract.from_env(os.environ).job_token or ""


def gather(
    listener: socket.socket,
    nnodes: int,
    mine: Facts,
    wait: float,
    token: str | None = None,
    log: Callable[[str], object] = lambda line: print(line, file=sys.stderr, flush=True),
) -> dict[int, Facts]:
    """Node 0: facts by node rank (its own as 0) from every node that reports within ``wait``;
    every reporting node gets them all back. A connection whose hello lacks the job's token
    (with a token: default the environment's), that says nothing within ``READ_TIMEOUT`` or
    sends garbage is dropped and logged once per address and reason; hellos are read side by
    side, so none of them holds the others."""
    token = _token() if token is None else token
    got: dict[int, Facts] = {0: mine}
    peers: list[socket.socket] = []
    said: set[tuple[str, str]] = set()
    deadline = time.monotonic() + wait

    def drop(conn: socket.socket, why: str) -> None:
        if (peer(conn, port=False), why) not in said:
            said.add((peer(conn, port=False), why))
            log(f"noderun doctor: dropped a report from {peer(conn)}: {why}")
        conn.close()

    hellos = FirstLines(listener, HELLO_LIMIT, READ_TIMEOUT)
    try:
        while len(got) < nnodes:
            arrived = hellos.next(deadline)
            if arrived is None:
                break
            conn, line, why = arrived
            words = (line or b"").decode(errors="replace").split()
            if line is None:
                drop(conn, why)
            elif len(words) != 2 or words[0] != "HELLO":
                drop(conn, "not a doctor of this job")
            elif token and not hmac.compare_digest(words[1].encode(), token.encode()):
                with contextlib.suppress(OSError):
                    conn.sendall(DENIED)
                drop(conn, "not this job's token")
            else:
                facts = _facts(conn, deadline)
                if facts is None:
                    drop(conn, "no facts line after its hello")
                else:
                    got[facts[0]] = facts[1]
                    peers.append(conn)
    finally:
        hellos.close()
    reply = (json.dumps({str(rank): facts for rank, facts in got.items()}) + "\n").encode()
    for conn in peers:
        with conn, contextlib.suppress(OSError):  # that node gave up: it prints its own row
            conn.sendall(reply)
    return got


def _facts(conn: socket.socket, deadline: float) -> tuple[int, Facts] | None:
    """(node rank, facts) of a node whose hello passed: told so, it sends them at once."""
    conn.settimeout(max(0.1, min(READ_TIMEOUT, deadline - time.monotonic())))
    try:
        conn.sendall(WELCOME)
        sent = json.loads(conn.makefile("rb").readline(LIMIT))
        return int(sent["node_rank"]), dict(sent["facts"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def report(
    address: str, port: int, node_rank: int, mine: Facts, wait: float, token: str | None = None
) -> dict[int, Facts]:
    """Another node: send this node's facts to node 0 (retrying until ``wait`` runs out), get
    every node's back; ``{node_rank: mine}`` alone when node 0 never answered."""
    deadline = time.monotonic() + wait
    token = _token() if token is None else token
    hello = f"HELLO {token or '-'}\n".encode()
    line = (json.dumps({"node_rank": node_rank, "facts": mine}, default=str) + "\n").encode()
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((address, port), timeout=2) as sock:
                sock.sendall(hello)
                sock.settimeout(max(1.0, deadline - time.monotonic()))  # node 0 may still probe
                answer = sock.makefile("rb")
                if answer.readline(HELLO_LIMIT) != WELCOME:  # turned away, or not node 0
                    raise ConnectionError("not welcomed")
                sock.sendall(line)
                # node 0 answers once every node reported: wait as long as it may wait
                sock.settimeout(max(1.0, deadline - time.monotonic()) + wait)
                everyone = json.loads(answer.readline(LIMIT) or b"null")
            if isinstance(everyone, dict):
                return {int(rank): facts for rank, facts in everyone.items()}
        except (OSError, ValueError):
            pass
        time.sleep(0.2)
    return {node_rank: mine}


def listen(port: int) -> socket.socket:
    """Node 0's listener for ``gather`` (raises OSError when the port is taken)."""
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("", port))
    listener.listen(64)
    return listener
