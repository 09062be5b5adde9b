"""Hand-started nodes: every node's probe facts to node 0 and the whole set back to every node.

``noderun doctor --nnodes N --node-rank R --master-addr A`` runs on each machine (seed 001:
no scheduler, nobody to start the probes together). Each node probes itself; node 0 then
listens on the port after the master port, each other node sends its facts as one JSON line
and gets every node's facts back, so every node prints the same table. Node 0 answers when
all N reported or when ``wait`` runs out; the nodes that never came are named.
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

from noderun.topology.contract import RankContract

Facts = dict[str, Any]
LIMIT = 64 << 20  # bytes of one node's facts line
READ_TIMEOUT = 5.0  # a node sends its line at once: a silent connection is not one of ours


def _peer(conn: socket.socket) -> str:
    try:
        return "{}:{}".format(*conn.getpeername()[:2])
    except OSError:
        return "an unknown peer"


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
    every reporting node gets them all back. With a token (default: the environment's), a
    report without it is dropped and logged; a connection that says nothing holds node 0 for
    at most ``READ_TIMEOUT``."""
    token = _token() if token is None else token
    got: dict[int, Facts] = {0: mine}
    peers: list[socket.socket] = []
    deadline = time.monotonic() + wait
    listener.settimeout(0.2)
    while len(got) < nnodes and time.monotonic() < deadline:
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            continue
        conn.settimeout(max(0.1, min(READ_TIMEOUT, deadline - time.monotonic())))
        try:
            sent = json.loads(conn.makefile("rb").readline(LIMIT))
            if token and not hmac.compare_digest(str(sent.get("token", "")), token):
                log(f"noderun doctor: dropped a report from {_peer(conn)}: not this job's token")
                conn.close()
                continue
            got[int(sent["node_rank"])] = sent["facts"]
            peers.append(conn)
        except (OSError, ValueError, KeyError, TypeError):
            conn.close()  # not a doctor of this job: ignore it
    reply = (json.dumps({str(rank): facts for rank, facts in got.items()}) + "\n").encode()
    for conn in peers:
        with conn, contextlib.suppress(OSError):  # that node gave up: it prints its own row
            conn.sendall(reply)
    return got


def report(
    address: str, port: int, node_rank: int, mine: Facts, wait: float, token: str | None = None
) -> dict[int, Facts]:
    """Another node: send this node's facts to node 0 (retrying until ``wait`` runs out), get
    every node's back; ``{node_rank: mine}`` alone when node 0 never answered."""
    deadline = time.monotonic() + wait
    sent = {"node_rank": node_rank, "facts": mine, "token": _token() if token is None else token}
    line = (json.dumps(sent, default=str) + "\n").encode()
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((address, port), timeout=2) as sock:
                sock.sendall(line)
                # node 0 answers once every node reported: wait as long as it may wait
                sock.settimeout(max(1.0, deadline - time.monotonic()) + wait)
                everyone = json.loads(sock.makefile("rb").readline(LIMIT) or b"null")
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
