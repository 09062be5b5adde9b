"""srun mode's store is torch's own TCPStore (rank 0 serves it on the gate's socket): strangers
at its port (garbage, an HTTP probe, an oversized message, many connections that say nothing)
never stop or stall it, and the job's clients go on at once. torch's store has no token: a
client of another job that knows the port can read and write keys, the limit
docs/reliability.md states (the same as under torchrun, whose agent serves the same store)."""

from __future__ import annotations

import datetime
import os
import socket
import time

from noderun.backends import store_host
from noderun.backends.node_gate import listen
from noderun.backends.ports import free_port


def test_strangers_never_stop_or_stall_the_srun_mode_store() -> None:
    import torch.distributed as dist

    port = free_port()
    fd = int(store_host.hand_over(listen(port, "this host"))[store_host.FD_VARIABLE])
    store_host.serve(dist, fd, port)
    wait = datetime.timedelta(seconds=5)
    job = dist.TCPStore("127.0.0.1", port, None, False, wait, wait_for_workers=False)
    job.set("rank0_addr", "10.0.0.1")

    strangers = [socket.create_connection(("127.0.0.1", port)) for _ in range(50)]  # silent
    for junk in (
        os.urandom(4096),
        b"GET / HTTP/1.1\r\nHost: node1\r\n\r\n",
        b"\x00" + b"\xff" * 8 + os.urandom(1 << 20),  # a huge length, then a megabyte
    ):
        sock = socket.create_connection(("127.0.0.1", port))
        sock.sendall(junk)
        strangers.append(sock)

    started = time.monotonic()
    peer = dist.TCPStore("127.0.0.1", port, None, False, wait, wait_for_workers=False)
    peer.set("rank1_addr", "10.0.0.2")
    assert job.get("rank1_addr") == b"10.0.0.2" and peer.get("rank0_addr") == b"10.0.0.1"
    assert job.add("arrived", 1) + peer.add("arrived", 1) == 3
    assert time.monotonic() - started < 3, "the store stalled behind the strangers"

    # the limit: torch's store asks no token, so a client that knows the port reads the keys
    other_job = dist.TCPStore("127.0.0.1", port, None, False, wait, wait_for_workers=False)
    assert other_job.get("rank0_addr") == b"10.0.0.1"
    for sock in strangers:
        sock.close()
    assert job.get("rank1_addr") == b"10.0.0.2"  # and it serves on after they are gone
