"""A rendezvous that fails fast and names who never arrived, instead of a 30-minute hang."""

from __future__ import annotations

import datetime
import socket
import time
from typing import Any

from noderun.errors import RendezvousTimeoutError
from noderun.topology import Topology

ARRIVED = "noderun/arrived/"


def _missing(store: Any, world_size: int) -> list[int]:
    return [r for r in range(world_size) if not store.check([f"{ARRIVED}{r}"])]


def fail_fast_store(topo: Topology, join_timeout: float, collective_timeout: float) -> Any:
    """Create the TCPStore with a short join timeout; every rank records its host on arrival.

    Returns the store, its timeout raised to ``collective_timeout`` for the job's lifetime.
    """
    from torch.distributed import TCPStore  # type: ignore[attr-defined]

    host = socket.gethostname()
    where = f"{topo.master_addr}:{topo.master_port}"
    try:
        store = TCPStore(
            host_name=str(topo.master_addr),
            port=int(topo.master_port or 0),
            world_size=None,
            is_master=topo.rank == 0,
            timeout=datetime.timedelta(seconds=join_timeout),
            wait_for_workers=False,
        )
    except Exception as err:  # torch raises DistNetworkError/DistStoreError/RuntimeError
        text = str(err).splitlines()[0] if str(err) else type(err).__name__
        if topo.rank == 0:
            raise RendezvousTimeoutError(
                f"rank 0 on {host} could not listen on {where}: {text}",
                "the port is in use or the address is not this host; set MASTER_PORT to a free "
                "port and MASTER_ADDR to this host",
            ) from err
        raise RendezvousTimeoutError(
            f"rank {topo.rank} on {host} could not reach the master {where} within "
            f"{join_timeout:.0f} s: {text}",
            "rank 0 never started (missing srun/torchrun on that node?) or MASTER_ADDR is wrong; "
            "run `noderun doctor`",
        ) from err
    store.set(f"{ARRIVED}{topo.rank}", host)
    deadline = time.monotonic() + join_timeout
    while time.monotonic() < deadline:
        if not _missing(store, topo.world_size):
            break
        time.sleep(0.05)
    else:
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
