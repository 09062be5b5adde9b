"""noderun.init()'s store: a rank that arrives before rank 0 listens, the arrival wait."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import pytest

from noderun.backends import store_host
from noderun.backends.node_gate import listen
from noderun.backends.ports import free_port
from noderun.errors import RendezvousTimeoutError
from noderun.runtime.rendezvous import ALL_ARRIVED, fail_fast_store, wait_for_listener
from noderun.topology import Topology


def _topo(rank: int, world: int, port: int) -> Topology:
    return Topology(rank=rank, world_size=world, master_addr="127.0.0.1", master_port=port)


def test_wait_for_listener_returns_once_the_port_listens() -> None:
    port = free_port()
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)

    def listen_later() -> None:
        time.sleep(0.3)
        server.bind(("127.0.0.1", port))
        server.listen()

    thread = threading.Thread(target=listen_later)
    thread.start()
    try:
        assert wait_for_listener("127.0.0.1", port, timeout=20) is None
    finally:
        thread.join()
        server.close()


def test_wait_for_listener_gives_the_last_error_at_its_deadline() -> None:
    error = wait_for_listener("127.0.0.1", free_port(), timeout=0.2)
    assert error is not None and "refused" in error.lower()


def test_ranks_that_arrive_before_the_master_listens_all_join() -> None:
    """Ranks 1 and 2 start first; rank 0 creates the store later; all three get it."""
    port = free_port()
    stores: dict[int, Any] = {}
    errors: list[BaseException] = []

    def join(rank: int) -> None:
        try:
            stores[rank] = fail_fast_store(_topo(rank, 3, port), 20.0, 60.0)
        except BaseException as err:  # reported by the assertion below
            errors.append(err)

    early = [threading.Thread(target=join, args=(r,)) for r in (1, 2)]
    for thread in early:
        thread.start()
    time.sleep(0.4)  # both are polling for the listener now
    assert not stores and not errors
    join(0)
    for thread in early:
        thread.join(timeout=30)
    assert not errors, errors
    assert sorted(stores) == [0, 1, 2]
    assert all(store.check([ALL_ARRIVED]) for store in stores.values())


def test_under_an_agent_store_rank_0_is_a_client_too() -> None:
    """srun mode's store host (or torchrun's agent) serves MASTER_PORT: rank 0 must not try
    to listen there, and the arrival check still works through the hosted store."""
    import torch.distributed as dist

    port = free_port()
    listener = listen(port, "this host")
    fd = int(store_host.hand_over(listener)[store_host.FD_VARIABLE])
    stores: dict[int, Any] = {}
    errors: list[BaseException] = []

    def join(rank: int) -> None:
        try:
            stores[rank] = fail_fast_store(_topo(rank, 3, port), 20.0, 60.0, agent_store=True)
        except BaseException as err:  # reported by the assertion below
            errors.append(err)

    threads = [threading.Thread(target=join, args=(r,)) for r in (0, 1, 2)]
    for thread in threads:
        thread.start()
    time.sleep(0.3)  # every rank is connecting: they wait in the backlog, none is refused
    store_host.serve(dist, fd, port)
    for thread in threads:
        thread.join(timeout=30)
    assert not errors, errors
    assert sorted(stores) == [0, 1, 2]
    assert all(store.check([ALL_ARRIVED]) for store in stores.values())


def test_a_missing_rank_is_named_by_the_master() -> None:
    with pytest.raises(RendezvousTimeoutError, match=r"1/2 ranks joined .* never arrived: ranks 1"):
        fail_fast_store(_topo(0, 2, free_port()), 0.5, 60.0)


def test_a_master_that_never_listens_is_named() -> None:
    port = free_port()
    said = f"could not reach the master 127.0.0.1:{port}"
    with pytest.raises(RendezvousTimeoutError, match=said):
        fail_fast_store(_topo(1, 2, port), 0.5, 60.0)
