"""srun mode's store: torch's own TCPStore served by rank 0 on the socket the gate listened on,
with real torch clients and a real gloo process group whose rank 0 starts last."""

from __future__ import annotations

import datetime
import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from noderun import rank_entry
from noderun.backends import store_host
from noderun.backends.node_gate import listen
from noderun.backends.ports import free_port
from noderun.plan.launch import RANK_ENTRY


def test_the_rank_entry_and_the_host_name_the_same_variable() -> None:
    assert rank_entry.STORE_FD_VARIABLE == store_host.FD_VARIABLE


def test_torch_serves_every_store_call_on_the_handed_socket() -> None:
    import torch.distributed as dist

    port = free_port()
    listener = listen(port, "this host")
    early = socket.create_connection(("127.0.0.1", port), timeout=5)  # waits in the backlog
    fd = int(store_host.hand_over(listener)[store_host.FD_VARIABLE])
    store_host.serve(dist, fd, port)
    timeout = datetime.timedelta(seconds=10)
    one = dist.TCPStore("127.0.0.1", port, None, False, timeout, wait_for_workers=False)
    two = dist.TCPStore("127.0.0.1", port, None, False, timeout, wait_for_workers=False)
    one.set("a", "1")
    assert two.get("a") == b"1"
    assert (one.add("n", 2), two.add("n", 3)) == (2, 5)
    assert one.compare_set("a", "1", "2") == b"2"
    one.multi_set(["k1", "k2"], ["v1", "v2"])
    assert two.multi_get(["k1", "k2"]) == [b"v1", b"v2"]
    with pytest.raises(dist.DistStoreError):
        one.wait(["never"], datetime.timedelta(seconds=0.2))
    assert one.get("a") == b"2"
    early.close()


def test_a_torch_without_master_listen_fd_binds_the_port_again() -> None:
    """The feature is asked of the installed torch's TCPStore, not of its version."""
    import torch.distributed as dist

    class OldTCPStore:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            if "master_listen_fd" in kwargs:
                raise TypeError("__init__(): incompatible constructor arguments")
            self.inner = dist.TCPStore(*args, **kwargs)

    class OldTorch:
        TCPStore = OldTCPStore

    port = free_port()
    fd = int(store_host.hand_over(listen(port, "this host"))[store_host.FD_VARIABLE])
    said: list[str] = []
    served = store_host.serve(OldTorch, fd, port, said=said.append)
    assert isinstance(served, OldTCPStore) and f"binding port {port} again" in said[0]
    client = dist.TCPStore("127.0.0.1", port, None, False, datetime.timedelta(seconds=10))
    client.set("k", "v")
    assert served.inner.get("k") == b"v"


RANK = """
import os, sys, time
started = {"torch_before_script": "torch" in sys.modules, "fd": os.environ.get("FD_VARIABLE")}
import torch, torch.distributed as dist
dist.init_process_group("gloo")
value = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(value)
print(f"rank {dist.get_rank()} sum {value.item():g} {started}", flush=True)
dist.destroy_process_group()
""".replace("FD_VARIABLE", store_host.FD_VARIABLE)


def test_a_process_group_forms_when_rank_0_starts_last(tmp_path: Path) -> None:
    """What the hosted store is for: ranks 1-2 reach init_process_group before rank 0 has even
    started; their connections wait in the backlog of the gate's socket (never refused), and
    rank 0, through the rank entry, serves torch's store on it only once its script imports
    torch.distributed (torch is not imported before the script)."""
    script = tmp_path / "rank.py"
    script.write_text(RANK)
    (tmp_path / "logs").mkdir()
    port = free_port()
    listener = listen(port, "this host", backlog=16)
    env = {
        **os.environ,
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "WORLD_SIZE": "3",
        "TORCHELASTIC_USE_AGENT_STORE": "True",
        "TORCHELASTIC_RESTART_COUNT": "0",
        "NODERUN__RUN_DIR": str(tmp_path),
    }

    def start(rank: int, extra: dict[str, str], fds: tuple[int, ...] = ()) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, RANK_ENTRY, str(script)],
            env={**env, "RANK": str(rank), "LOCAL_RANK": str(rank), **extra},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            pass_fds=fds,
        )

    early = [start(1, {}), start(2, {})]
    with socket.create_connection(("127.0.0.1", port), timeout=5):
        pass  # the port accepts before any store runs
    time.sleep(1.0)  # ranks 1-2 import torch and wait in init_process_group meanwhile
    handed = store_host.hand_over(listener)
    fd = int(handed[store_host.FD_VARIABLE])
    ranks = [start(0, handed, (fd,)), *early]
    os.close(fd)
    outputs = [p.communicate(timeout=120)[0] for p in ranks]
    assert [p.returncode for p in ranks] == [0, 0, 0], outputs
    assert [out.strip().splitlines()[-1].split(" {")[0] for out in outputs] == [
        "rank 0 sum 6",
        "rank 1 sum 6",
        "rank 2 sum 6",
    ]
    # rank 0's script saw no torch before its own import, and no socket variable
    assert "{'torch_before_script': False, 'fd': None}" in outputs[0]
    assert "refused" not in "".join(outputs)
    stages = (tmp_path / "logs" / "timeline.jsonl").read_text()
    assert stages.count('"store_hosted"') == 1 and '"who": "rank0"' in stages


def test_a_busy_master_port_is_a_usage_error() -> None:
    from noderun.errors import UsageError

    with socket.socket() as busy:
        busy.bind(("", 0))
        busy.listen()
        with pytest.raises(UsageError, match="already in use"):
            listen(busy.getsockname()[1], "node1")


def test_the_rank_entry_serves_nothing_without_a_socket(tmp_path: Path) -> None:
    script = tmp_path / "show.py"
    script.write_text(
        textwrap.dedent(
            """
            import sys
            import torch.distributed
            print("hooks", [type(f).__name__ for f in sys.meta_path])
            """
        )
    )
    env = {k: v for k, v in os.environ.items() if k != store_host.FD_VARIABLE}
    out = subprocess.run(
        [sys.executable, RANK_ENTRY, str(script)], env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert "_ServeAfterImport" not in out.stdout
