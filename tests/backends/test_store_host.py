"""The srun-mode store host: its protocol state machine on bytes, then real torch TCPStore
clients and a real gloo process group against it in its own process."""

from __future__ import annotations

import datetime
import os
import signal
import socket
import struct
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from noderun.backends import store_host
from noderun.backends.node_gate import listen
from noderun.backends.ports import free_port
from noderun.backends.store_host import (
    NOT_READY,
    READY,
    STOP_WAITING,
    WAIT_CANCELED,
    Incomplete,
    ProtocolError,
    Query,
    Reader,
    Store,
)

MAGIC = struct.pack("<I", store_host.VALIDATION_MAGIC)


def q(kind: Query, *fields: bytes) -> bytes:
    return bytes([kind]) + b"".join(fields)


def s(text: str) -> bytes:
    return struct.pack("<Q", len(text.encode())) + text.encode()


def n(count: int) -> bytes:
    return struct.pack("<Q", count)


def i64(value: int) -> bytes:
    return struct.pack("<q", value)


class Harness:
    """A Store with answers collected per client; ``ask`` feeds one whole query."""

    def __init__(self) -> None:
        self.answers: dict[str, bytearray] = {}
        self.store = Store(lambda client, data: self.answers[str(client)].extend(data))

    def client(self, name: str) -> str:
        self.answers[name] = bytearray()
        self.ask(name, q(Query.VALIDATE, MAGIC))
        return name

    def ask(self, client: str, data: bytes) -> bytes:
        before = len(self.answers[client])
        read = Reader(data)
        self.store.handle(client, read)
        assert read.at == len(data), "the query was not read whole"
        return bytes(self.answers[client][before:])


def test_set_get_add_check_and_the_numbers_torch_expects() -> None:
    h = Harness()
    a = h.client("a")
    assert h.ask(a, q(Query.SET, s("/k"), s("v1"))) == b""
    assert h.ask(a, q(Query.GET, s("/k"))) == s("v1")
    assert h.ask(a, q(Query.ADD, s("/n"), i64(2))) == i64(2)
    assert h.ask(a, q(Query.ADD, s("/n"), i64(-5))) == i64(-3)
    assert h.ask(a, q(Query.GET, s("/n"))) == s("-3")  # stored as decimal text, as torch does
    assert h.ask(a, q(Query.CHECK, n(2), s("/k"), s("/n"))) == READY
    assert h.ask(a, q(Query.CHECK, n(2), s("/k"), s("/nope"))) == NOT_READY
    assert h.ask(a, q(Query.GETNUMKEYS)) == i64(2)
    assert h.ask(a, q(Query.DELETE_KEY, s("/k"))) == i64(1)
    assert h.ask(a, q(Query.DELETE_KEY, s("/k"))) == i64(0)
    assert h.ask(a, q(Query.PING, struct.pack("<I", 4242))) == struct.pack("<I", 4242)
    h.ask(a, q(Query.APPEND, s("/n"), s("x")))
    with pytest.raises(ProtocolError, match="no number"):  # torch's server fails it too
        h.ask(a, q(Query.ADD, s("/n"), i64(1)))


def test_compare_set_answers_as_torchs_server() -> None:
    h = Harness()
    a = h.client("a")
    assert h.ask(a, q(Query.COMPARE_SET, s("/c"), s(""), s("new"))) == s("new")  # created
    assert h.ask(a, q(Query.COMPARE_SET, s("/c"), s("other"), s("x"))) == s("new")  # no match
    assert h.ask(a, q(Query.COMPARE_SET, s("/c"), s("new"), s("y"))) == s("y")  # swapped
    assert h.ask(a, q(Query.COMPARE_SET, s("/m"), s("exp"), s("z"))) == s("exp")  # missing key
    assert "/m" not in h.store.data


def test_wait_answers_when_the_last_awaited_key_arrives_and_cancel_forgets_it() -> None:
    h = Harness()
    a, b, c = h.client("a"), h.client("b"), h.client("c")
    assert h.ask(a, q(Query.WAIT, n(2), s("/x"), s("/y"))) == b""
    assert h.ask(c, q(Query.WAIT, n(1), s("/y"))) == b""
    h.ask(b, q(Query.SET, s("/x"), s("1")))
    assert bytes(h.answers[a]) == b"" and bytes(h.answers[c]) == b""
    h.ask(b, q(Query.MULTI_SET, n(1), s("/y"), s("2")))
    assert bytes(h.answers[a]) == bytes(h.answers[c]) == STOP_WAITING
    assert h.ask(a, q(Query.WAIT, n(1), s("/x"))) == STOP_WAITING  # present: at once
    assert h.ask(b, q(Query.MULTI_GET, n(2), s("/x"), s("/y"))) == s("1") + s("2")
    # a wait that timed out on the client side: torch sends CANCEL_WAIT, then other queries
    assert h.ask(a, q(Query.WAIT, n(1), s("/never"))) == b""
    assert h.ask(a, q(Query.CANCEL_WAIT)) == WAIT_CANCELED
    h.ask(b, q(Query.SET, s("/never"), s("late")))
    assert h.ask(a, q(Query.GET, s("/x"))) == s("1")  # no stray STOP_WAITING before it


def test_a_closed_client_is_not_woken_and_append_barrier_and_queues_work() -> None:
    h = Harness()
    a, b = h.client("a"), h.client("b")
    h.ask(a, q(Query.WAIT, n(1), s("/k")))
    h.store.forget(a)
    h.ask(b, q(Query.APPEND, s("/k"), s("x")))
    h.ask(b, q(Query.APPEND, s("/k"), s("y")))
    assert bytes(h.answers[a]) == b"" and h.ask(b, q(Query.GET, s("/k"))) == s("xy")
    a = h.client("a")
    assert h.ask(a, q(Query.BARRIER, s("/bar"), i64(2))) == b""
    assert h.ask(b, q(Query.BARRIER, s("/bar"), i64(2))) == STOP_WAITING
    assert bytes(h.answers[a]) == STOP_WAITING
    h.answers[a].clear()
    assert h.ask(a, q(Query.WAIT, n(1), s("/q"))) == b""
    h.ask(b, q(Query.QUEUE_PUSH, s("/q"), s("one")))
    h.ask(b, q(Query.QUEUE_PUSH, s("/q"), s("two")))
    assert bytes(h.answers[a]) == STOP_WAITING  # one waiter woken per push
    assert h.ask(b, q(Query.QUEUE_LEN, s("/q"))) == i64(2)
    assert h.ask(b, q(Query.QUEUE_POP, s("/q"))) == i64(2) + s("one")
    assert h.ask(b, q(Query.QUEUE_POP, s("/q"))) == i64(1) + s("two")
    assert h.ask(b, q(Query.QUEUE_POP, s("/q"))) == i64(0)
    assert h.ask(b, q(Query.LIST_KEYS)) == i64(2) + s("/k") + s("/bar")


def test_a_partial_query_changes_nothing_and_strangers_are_refused() -> None:
    h = Harness()
    a = h.client("a")
    whole = q(Query.SET, s("/k"), s("value"))
    for cut in range(1, len(whole)):
        with pytest.raises(Incomplete):
            h.store.handle(a, Reader(whole[:cut]))
    assert h.store.data == {}
    h.answers["probe"] = bytearray()
    with pytest.raises(ProtocolError):  # a port probe or another program: no validation
        h.store.handle("probe", Reader(q(Query.GET, s("/k"))))
    with pytest.raises(ProtocolError):
        h.store.handle("probe", Reader(q(Query.VALIDATE, struct.pack("<I", 1))))
    with pytest.raises(ProtocolError, match="unknown query type 99"):
        h.store.handle(a, Reader(bytes([99])))


@pytest.fixture
def hosted(tmp_path: Path) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    """The store host in its own process (as node 0's task starts it), on a free port."""
    port = free_port()
    listener = listen(port, "this host")
    host = store_host.spawn(listener, str(tmp_path / "store.log"))
    listener.close()
    yield port, host
    host.send_signal(signal.SIGTERM)
    assert host.wait(timeout=10) == 0


def test_torch_clients_use_every_store_call(hosted: tuple[int, subprocess.Popen[bytes]]) -> None:
    import torch.distributed as dist

    port, _ = hosted
    timeout = datetime.timedelta(seconds=10)
    one = dist.TCPStore("127.0.0.1", port, None, False, timeout, wait_for_workers=False)
    two = dist.TCPStore("127.0.0.1", port, None, False, timeout, wait_for_workers=False)
    # set, append, multi_set and queue_push have no answer: a round trip on the writer's own
    # connection (served in order) before another connection reads, as with torch's server
    one.set("a", "1")
    assert two.get("a") == b"1"  # get waits for the key first
    assert (one.add("n", 2), two.add("n", 3)) == (2, 5)
    assert one.check(["a", "n"]) and not one.check(["zz"])
    assert one.compare_set("a", "1", "2") == b"2"
    one.append("ap", "x")
    assert one.check(["ap"])
    two.append("ap", "y")
    assert one.get("ap") == b"xy"
    one.multi_set(["k1", "k2"], ["v1", "v2"])
    assert one.check(["k1", "k2"])
    assert two.multi_get(["k1", "k2"]) == [b"v1", b"v2"]
    assert one.delete_key("k2") and one.num_keys() == 4
    assert sorted(two.list_keys()) == ["a", "ap", "k1", "n"]
    with pytest.raises(dist.DistStoreError):
        one.wait(["never"], datetime.timedelta(seconds=0.2))
    assert one.get("a") == b"2"  # the connection is still in step after the cancelled wait
    two.queue_push("q", "first")
    two.queue_push("q", "second")
    assert two.queue_len("q") == 2
    assert (one.queue_pop("q"), one.queue_pop("q", block=False)) == (b"first", b"second")


def test_a_process_group_forms_through_the_host_when_rank_0_is_last(
    hosted: tuple[int, subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    """What the host is for: ranks 1-2 reach init_process_group before rank 0 has even started;
    every rank, rank 0 too, is a client of the host (torchrun's agent-store variables)."""
    port, _ = hosted
    script = tmp_path / "rank.py"
    script.write_text(
        textwrap.dedent(
            """
            import os, torch, torch.distributed as dist
            dist.init_process_group("gloo")
            value = torch.tensor([float(dist.get_rank() + 1)])
            dist.all_reduce(value)
            print(f"rank {dist.get_rank()} sum {value.item():g}", flush=True)
            dist.destroy_process_group()
            os._exit(0)
            """
        )
    )
    env = {
        **os.environ,
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "WORLD_SIZE": "3",
        "TORCHELASTIC_USE_AGENT_STORE": "True",
        "TORCHELASTIC_RESTART_COUNT": "0",
    }

    def start(rank: int) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, str(script)],
            env={**env, "RANK": str(rank), "LOCAL_RANK": str(rank)},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    early = [start(1), start(2)]
    time.sleep(1.0)  # both import torch and wait in init_process_group meanwhile
    ranks = [start(0), *early]
    outputs = [p.communicate(timeout=120)[0] for p in ranks]
    assert [p.returncode for p in ranks] == [0, 0, 0], outputs
    assert [out.strip().splitlines()[-1] for out in outputs] == [
        "rank 0 sum 6",
        "rank 1 sum 6",
        "rank 2 sum 6",
    ]
    assert (
        not (tmp_path / "store.log").exists()
        or "closed" not in (tmp_path / "store.log").read_text()
    )


def test_the_host_leaves_with_its_parent(tmp_path: Path) -> None:
    """Spawned by a process that then exits (rank 0 ending): the host is gone soon after."""
    pid_file = tmp_path / "host.pid"
    parent = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(f"""
            import socket, sys, time
            from noderun.backends import store_host
            listener = socket.socket()
            listener.bind(("127.0.0.1", 0))
            listener.listen()
            pid = store_host.spawn(listener, None).pid
            open({str(pid_file)!r}, "w").write(str(pid))
            time.sleep(0.5)
            """)],
        timeout=60,
    )  # fmt: skip
    assert parent.returncode == 0
    pid = int(pid_file.read_text())
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.05)
    assert not _alive(pid), "the store host outlived its parent"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_busy_master_port_is_a_usage_error() -> None:
    from noderun.errors import UsageError

    with socket.socket() as busy:
        busy.bind(("", 0))
        busy.listen()
        with pytest.raises(UsageError, match="already in use"):
            listen(busy.getsockname()[1], "node1")


def test_only_torch_releases_whose_protocol_was_checked_get_the_host() -> None:
    from importlib.metadata import version

    assert store_host.torch_version() == version("torch")  # read without importing torch
    assert store_host.speaks_torchs_protocol("2.13.0+cpu")
    assert store_host.speaks_torchs_protocol("2.13.1")
    assert not store_host.speaks_torchs_protocol("2.14.0")
    assert not store_host.speaks_torchs_protocol("2.1.3")
    assert not store_host.speaks_torchs_protocol(None)
