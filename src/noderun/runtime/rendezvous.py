"""A rendezvous that fails fast and names who never arrived, instead of a 30-minute hang."""

from __future__ import annotations

import contextlib
import datetime
import socket
import time
from typing import Any

from noderun.errors import RendezvousTimeoutError
from noderun.topology import Topology

ARRIVED = "noderun/arrived/"
COUNT = "noderun/arrivals"
ALL_ARRIVED = "noderun/all-arrived"
LISTEN_POLL = 0.02  # seconds between connection attempts while rank 0's store is not up


def wait_for_listener(host: str, port: int, timeout: float) -> str | None:
    """Wait until ``host:port`` accepts a TCP connection; None then, else the last error.

    torch's TCPStore client retries a refused connection only every ~0.5 s, so a rank that
    finished importing before rank 0 started listening lost up to half a second at every start
    (measured: 0.4-0.5 s in 2 of 3 srun-mode jobs). Polling here at ``LISTEN_POLL`` lets the
    store connect at once when it is created."""
    deadline = time.monotonic() + timeout
    error = "no attempt"
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return error
        try:
            with socket.create_connection((host, port), timeout=min(left, 2.0)):
                return None
        except OSError as err:
            error = err.strerror or type(err).__name__
        time.sleep(min(LISTEN_POLL, max(deadline - time.monotonic(), 0)))


def _missing(store: Any, world_size: int) -> list[int]:
    return [r for r in range(world_size) if not store.check([f"{ARRIVED}{r}"])]


def fail_fast_store(
    topo: Topology, join_timeout: float, collective_timeout: float, agent_store: bool = False
) -> Any:
    """Create the TCPStore with a short join timeout; every rank records its host on arrival.

    ``agent_store``: the launcher already serves the store at MASTER_ADDR:MASTER_PORT
    (``TORCHELASTIC_USE_AGENT_STORE``: torchrun's agent, noderun's srun-mode store host), so
    rank 0 connects to it as every other rank does instead of starting one.

    Returns the store, its timeout raised to ``collective_timeout`` for the job's lifetime.
    """
    from torch.distributed import TCPStore  # type: ignore[attr-defined]

    host = socket.gethostname()
    where = f"{topo.master_addr}:{topo.master_port}"
    started = time.monotonic()
    is_master = topo.rank == 0 and not agent_store
    if not is_master:
        error = wait_for_listener(str(topo.master_addr), int(topo.master_port or 0), join_timeout)
        if error is not None:
            raise _unreachable(topo, host, where, join_timeout, error)
    try:
        store = TCPStore(
            host_name=str(topo.master_addr),
            port=int(topo.master_port or 0),
            world_size=None,
            is_master=is_master,
            timeout=datetime.timedelta(seconds=max(join_timeout - _since(started), 1.0)),
            wait_for_workers=False,
        )
    except Exception as err:  # torch raises DistNetworkError/DistStoreError/RuntimeError
        text = str(err).splitlines()[0] if str(err) else type(err).__name__
        if is_master:
            raise RendezvousTimeoutError(
                f"rank 0 on {host} could not listen on {where}: {text}",
                "the port is in use or the address is not this host; set MASTER_PORT to a free "
                "port and MASTER_ADDR to this host",
            ) from err
        raise _unreachable(topo, host, where, join_timeout, text) from err
    store.set(f"{ARRIVED}{topo.rank}", host)
    # the last rank to arrive says so; the others wait on that key (no polling round trips)
    if store.add(COUNT, 1) >= topo.world_size:
        store.set(ALL_ARRIVED, "1")
    left = datetime.timedelta(seconds=max(join_timeout - _since(started), 0.01))
    with contextlib.suppress(RuntimeError):  # torch's DistStoreError when the wait times out
        store.wait([ALL_ARRIVED], left)
    if not store.check([ALL_ARRIVED]):
        missing = _missing(store, topo.world_size)
        arrived = sorted(
            {
                store.get(f"{ARRIVED}{r}").decode()
                for r in range(topo.world_size)
                if r not in missing
            }
        )
        shown = ",".join(map(str, missing[:16])) + ("…" if len(missing) > 16 else "")
        raise RendezvousTimeoutError(
            f"{topo.world_size - len(missing)}/{topo.world_size} ranks joined at {where} within "
            f"{join_timeout:.0f} s; never arrived: ranks {shown}; arrived from hosts "
            f"{', '.join(arrived)}",
            "start every rank with srun or torchrun on every node (`srun python …` / "
            "`noderun run …`); if they were started, check MASTER_ADDR and the network "
            "(`noderun doctor`)",
        )
    store.set_timeout(datetime.timedelta(seconds=collective_timeout))
    return store


def _since(start: float) -> float:
    return time.monotonic() - start


def _unreachable(
    topo: Topology, host: str, where: str, join_timeout: float, text: str
) -> RendezvousTimeoutError:
    return RendezvousTimeoutError(
        f"rank {topo.rank} on {host} could not reach the master {where} within "
        f"{join_timeout:.0f} s: {text}",
        "rank 0 never started (missing srun/torchrun on that node?) or MASTER_ADDR is wrong; "
        "run `noderun doctor`",
    )
