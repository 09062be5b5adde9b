"""The rendezvous store of an srun-mode step, hosted before any rank imports torch.

One task per rank under srun has no torchrun agent, so rank 0's ``init_process_group`` starts
torch's TCPStore server itself, once it has imported torch; a rank that got there first is
refused and torch's client retries only after 0.25-0.75 s (exponential backoff from 0.5 s,
±50%). Measured on the lab, 2 nodes x 2 ranks: 0.2-0.5 s lost in most jobs. torchrun avoids it
by hosting the store in its agent (``TORCHELASTIC_USE_AGENT_STORE``); this file is that agent
store for srun mode: node 0's rank-0 task starts it on MASTER_PORT right after the check-in
gate, milliseconds after the step starts, and every rank (rank 0 too) connects as a client.

It speaks torch's TCPStore wire protocol (torch 2.13: one query-type byte, then fixed-size
little-endian integers, strings and payloads as u64 length + bytes; every command of the
libuv server). Standard library only, started by path like ``rank_entry.py``:

    python /…/noderun/backends/store_host.py --fd FD --parent PID [--log FILE]

It leaves when its parent (the rank-0 process) is gone, which is when a rank-0-hosted store
would have gone too.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import enum
import functools
import importlib.util
import os
import re
import selectors
import signal
import socket
import struct
import sys
import time
from collections.abc import Callable
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:  # the host process itself never needs subprocess
    import subprocess

VALIDATION_MAGIC = 0x3C85F7CE
STORE_HOST = os.path.abspath(__file__)
# torch releases whose TCPStore client this host was checked against, byte for byte (a logging
# proxy between torch's own server and its clients); others keep rank 0's own store
PROTOCOL_CHECKED = ("2.13.",)
_VERSION = re.compile(r"""^__version__\s*=\s*['"]([^'"]+)['"]""", re.MULTILINE)
PARENT_POLL = 0.25  # seconds between checks that rank 0 still runs
MAX_KEYS = 128 * 1024  # the libuv server's own limits: a larger count is not a TCPStore client
MAX_PAYLOAD = 256 * 1024 * 1024


@functools.cache
def torch_version() -> str | None:
    """The installed torch's version, read from its ``version.py`` without importing torch."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.origin:
        return None
    try:
        with open(os.path.join(os.path.dirname(spec.origin), "version.py")) as handle:
            match = _VERSION.search(handle.read())
    except OSError:
        return None
    return match.group(1) if match else None


def speaks_torchs_protocol(version: str | None) -> bool:
    """Whether this host was checked against ``version``'s TCPStore client."""
    return bool(version) and any(str(version).startswith(v) for v in PROTOCOL_CHECKED)


class Query(enum.IntEnum):
    """torch's ``c10d::detail::QueryType`` (TCPStoreBackend.hpp), in its order."""

    VALIDATE = 0
    SET = 1
    COMPARE_SET = 2
    GET = 3
    ADD = 4
    CHECK = 5
    WAIT = 6
    GETNUMKEYS = 7
    DELETE_KEY = 8
    APPEND = 9
    MULTI_GET = 10
    MULTI_SET = 11
    CANCEL_WAIT = 12
    PING = 13
    QUEUE_PUSH = 14
    QUEUE_POP = 15
    QUEUE_LEN = 16
    LIST_KEYS = 17
    BARRIER = 18


READY, NOT_READY = b"\x00", b"\x01"  # CheckResponseType
STOP_WAITING, WAIT_CANCELED = b"\x00", b"\x01"  # WaitResponseType


class Incomplete(Exception):
    """The buffer holds only part of a query: wait for more bytes."""


class ProtocolError(Exception):
    """Not a TCPStore client, or a query this host does not know: the connection is closed."""


class Reader:
    """Reads one query's fields from the front of a buffer; ``Incomplete`` when it ends early."""

    def __init__(self, data: bytes | bytearray) -> None:
        self.data = data
        self.at = 0

    def _take(self, size: int) -> bytes:
        if self.at + size > len(self.data):
            raise Incomplete
        chunk = bytes(self.data[self.at : self.at + size])
        self.at += size
        return chunk

    def u8(self) -> int:
        return self._take(1)[0]

    def u32(self) -> int:
        return int(struct.unpack("<I", self._take(4))[0])

    def u64(self) -> int:
        return int(struct.unpack("<Q", self._take(8))[0])

    def i64(self) -> int:
        return int(struct.unpack("<q", self._take(8))[0])

    def count(self) -> int:
        n = self.u64()
        if n > MAX_KEYS:
            raise ProtocolError(f"{n} keys in one query")
        return n

    def payload(self) -> bytes:
        size = self.u64()
        if size > MAX_PAYLOAD:
            raise ProtocolError(f"a {size}-byte value")
        return self._take(size)

    def key(self) -> str:
        return self.payload().decode("utf-8", errors="surrogateescape")


def vector(value: bytes) -> bytes:
    return struct.pack("<Q", len(value)) + value


def i64(value: int) -> bytes:
    return struct.pack("<q", value)


class Store:
    """The keys, queues and waiting clients; ``handle`` answers one query. No sockets here:
    ``send(client, bytes)`` delivers an answer, also to a client woken by another's query."""

    def __init__(self, send: Callable[[object, bytes], None]) -> None:
        self.send = send
        self.data: dict[str, bytes] = {}
        self.queues: dict[str, collections.deque[bytes]] = {}
        self.waiting: dict[str, list[object]] = {}  # key -> clients waiting on it
        self.awaited: dict[object, int] = {}  # client -> keys it still waits for
        self.validated: set[object] = set()

    def handle(self, client: object, read: Reader) -> None:
        """One whole query from ``read`` (raises Incomplete before changing anything)."""
        kind = read.u8()
        if client not in self.validated:
            if kind != Query.VALIDATE or read.u32() != VALIDATION_MAGIC:
                raise ProtocolError("no validation")
            self.validated.add(client)
            return
        try:
            query = Query(kind)
        except ValueError:
            raise ProtocolError(f"unknown query type {kind}") from None
        handler = getattr(self, f"_{query.name.lower()}")
        handler(client, read)

    def forget(self, client: object) -> None:
        """A closed connection: nothing waits for it any more."""
        self.validated.discard(client)
        self._clear_waits(client)

    def _clear_waits(self, client: object) -> None:
        if self.awaited.pop(client, None) is None:
            return
        for key in list(self.waiting):
            self.waiting[key] = [c for c in self.waiting[key] if c is not client]
            if not self.waiting[key]:
                del self.waiting[key]

    def _present(self, key: str) -> bool:
        return key in self.data or bool(self.queues.get(key))

    def _wake(self, key: str, one: bool = False) -> None:
        clients = self.waiting.get(key, [])
        for client in list(clients):
            self.awaited[client] -= 1
            if self.awaited[client] == 0:
                del self.awaited[client]
                clients.remove(client)
                self.send(client, STOP_WAITING)
                if one:
                    break
        if not one or not clients:
            self.waiting.pop(key, None)

    def _set_value(self, key: str, value: bytes) -> None:
        self.data[key] = value
        self._wake(key)

    def _validate(self, client: object, read: Reader) -> None:
        read.u32()  # a second validation changes nothing

    def _set(self, client: object, read: Reader) -> None:
        key, value = read.key(), read.payload()
        self._set_value(key, value)

    def _compare_set(self, client: object, read: Reader) -> None:
        key, expected, desired = read.key(), read.payload(), read.payload()
        if key not in self.data:
            if expected:  # as torch's server answers a missing key: the expected value
                answer = expected
            else:
                self.data[key] = answer = desired
        else:
            if self.data[key] == expected:
                self.data[key] = desired
            answer = self.data[key]
        self._wake(key)
        self.send(client, vector(answer))

    def _get(self, client: object, read: Reader) -> None:
        self.send(client, vector(self.data.get(read.key(), b"")))

    def _add(self, client: object, read: Reader) -> None:
        key, amount = read.key(), read.i64()
        try:
            total = amount + int(self.data.get(key, b"0"))
        except ValueError:
            raise ProtocolError(f"add to {key!r}, which holds no number") from None
        self._set_value(key, str(total).encode())
        self.send(client, i64(total))

    def _keys(self, read: Reader) -> list[str]:
        return [read.key() for _ in range(read.count())]

    def _check(self, client: object, read: Reader) -> None:
        keys = self._keys(read)
        self.send(client, READY if all(map(self._present, keys)) else NOT_READY)

    def _wait(self, client: object, read: Reader) -> None:
        keys = self._keys(read)
        if all(map(self._present, keys)):
            self.send(client, STOP_WAITING)
            return
        missing = [key for key in keys if key not in self.data]
        for key in missing:
            self.waiting.setdefault(key, []).append(client)
        self.awaited[client] = len(missing)

    def _getnumkeys(self, client: object, read: Reader) -> None:
        self.send(client, i64(len(self.data)))

    def _delete_key(self, client: object, read: Reader) -> None:
        self.send(client, i64(1 if self.data.pop(read.key(), None) is not None else 0))

    def _append(self, client: object, read: Reader) -> None:
        key, value = read.key(), read.payload()
        self._set_value(key, self.data.get(key, b"") + value)

    def _multi_get(self, client: object, read: Reader) -> None:
        keys = self._keys(read)
        self.send(client, b"".join(vector(self.data.get(key, b"")) for key in keys))

    def _multi_set(self, client: object, read: Reader) -> None:
        pairs = [(read.key(), read.payload()) for _ in range(read.count())]
        for key, value in pairs:
            self._set_value(key, value)

    def _cancel_wait(self, client: object, read: Reader) -> None:
        self._clear_waits(client)
        self.send(client, WAIT_CANCELED)

    def _ping(self, client: object, read: Reader) -> None:
        self.send(client, struct.pack("<I", read.u32()))

    def _queue_push(self, client: object, read: Reader) -> None:
        key, value = read.key(), read.payload()
        self.queues.setdefault(key, collections.deque()).append(value)
        self._wake(key, one=True)

    def _queue_pop(self, client: object, read: Reader) -> None:
        queue = self.queues.setdefault(read.key(), collections.deque())
        answer = i64(len(queue)) + (vector(queue.popleft()) if queue else b"")
        self.send(client, answer)

    def _queue_len(self, client: object, read: Reader) -> None:
        self.send(client, i64(len(self.queues.get(read.key(), ()))))

    def _list_keys(self, client: object, read: Reader) -> None:
        self.send(client, i64(len(self.data)) + b"".join(vector(k.encode()) for k in self.data))

    def _barrier(self, client: object, read: Reader) -> None:
        key, world_size = read.key(), read.i64()
        count = int(self.data.get(key, b"0")) + 1
        self.data[key] = str(count).encode()
        if count >= world_size:
            self._wake(key)
            self.send(client, STOP_WAITING)
        else:
            self.waiting.setdefault(key, []).append(client)
            self.awaited[client] = 1


class Connection:
    def __init__(self, sock: socket.socket, peer: str) -> None:
        self.sock = sock
        self.peer = peer
        self.inbox = bytearray()
        self.outbox = bytearray()


class StoreHost:
    """Serves ``Store`` on an already listening socket until ``stop()`` or ``keep_going()``
    turns false. One thread, ``selectors``; answers are buffered, never block the loop."""

    def __init__(self, listener: socket.socket, log: IO[str] | None = None) -> None:
        self.listener = listener
        self.log = log
        self.store = Store(self._send)
        self.selector = selectors.DefaultSelector()
        self.connections: dict[socket.socket, Connection] = {}
        self._stopped = False
        listener.setblocking(False)
        self.selector.register(listener, selectors.EVENT_READ)

    def say(self, text: str) -> None:
        if self.log is not None:
            print(f"{time.strftime('%H:%M:%S')} noderun store: {text}", file=self.log, flush=True)

    def stop(self) -> None:
        self._stopped = True

    def serve(self, keep_going: Callable[[], bool] = lambda: True, tick: float = 1.0) -> None:
        try:
            while not self._stopped and keep_going():
                for key, events in self.selector.select(timeout=tick):
                    sock = key.fileobj
                    assert isinstance(sock, socket.socket)
                    if sock is self.listener:
                        self._accept()
                    elif sock in self.connections:
                        self._on_ready(self.connections[sock], events)
        finally:
            for conn in list(self.connections.values()):
                self._close(conn, None)
            self.selector.close()

    def _accept(self) -> None:
        with contextlib.suppress(BlockingIOError, InterruptedError):
            sock, address = self.listener.accept()
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.connections[sock] = Connection(sock, f"{address[0]}:{address[1]}")
            self.selector.register(sock, selectors.EVENT_READ)

    def _on_ready(self, conn: Connection, events: int) -> None:
        if events & selectors.EVENT_WRITE:
            self._flush(conn)
        if events & selectors.EVENT_READ and conn.sock in self.connections:
            try:
                data = conn.sock.recv(1 << 16)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as err:
                self._close(conn, f"receive failed: {err.strerror}")
                return
            if not data:
                self._close(conn, None)
                return
            conn.inbox += data
            self._answer(conn)

    def _answer(self, conn: Connection) -> None:
        while conn.inbox and conn.sock in self.connections:
            read = Reader(conn.inbox)
            try:
                self.store.handle(conn, read)
            except Incomplete:
                return
            except ProtocolError as err:
                validated = conn in self.store.validated
                self._close(conn, str(err) if validated else None)  # a probe: not worth a line
                return
            del conn.inbox[: read.at]

    def _send(self, client: object, data: bytes) -> None:
        assert isinstance(client, Connection)
        client.outbox += data
        self._flush(client)

    def _flush(self, conn: Connection) -> None:
        try:
            sent = conn.sock.send(conn.outbox) if conn.outbox else 0
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError as err:
            self._close(conn, f"send failed: {err.strerror}")
            return
        del conn.outbox[:sent]
        want = selectors.EVENT_READ | (selectors.EVENT_WRITE if conn.outbox else 0)
        if self.selector.get_key(conn.sock).events != want:
            self.selector.modify(conn.sock, want)

    def _close(self, conn: Connection, why: str | None) -> None:
        if why:
            self.say(f"closed {conn.peer}: {why}")
        self.store.forget(conn)
        self.connections.pop(conn.sock, None)
        with contextlib.suppress(KeyError, ValueError):
            self.selector.unregister(conn.sock)
        conn.sock.close()


_spawned: list[subprocess.Popen[bytes]] = []  # kept: a dropped Popen warns while its child runs


def spawn(listener: socket.socket, log_path: str | None) -> subprocess.Popen[bytes]:
    """Start the host on ``listener`` (inherited, already listening) as a child of this process,
    leaving when this process is gone. Its stdio is not the task's: srun's output closes when the
    ranks end."""
    import subprocess

    fd = listener.fileno()
    argv = [sys.executable, STORE_HOST, "--fd", str(fd), "--parent", str(os.getpid())]
    if log_path:
        argv += ["--log", log_path]
    child = subprocess.Popen(
        argv,
        pass_fds=(fd,),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        close_fds=True,
    )
    _spawned.append(child)
    return child


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="store_host.py", description=__doc__)
    parser.add_argument("--fd", type=int, required=True, help="a listening TCP socket")
    parser.add_argument("--parent", type=int, help="leave when this process is gone")
    parser.add_argument("--log", help="append problems to this file")
    opts = parser.parse_args(argv)
    listener = socket.socket(fileno=opts.fd)
    log = open(opts.log, "a") if opts.log else None  # noqa: SIM115
    host = StoreHost(listener, log)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: host.stop())
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)  # sbatch --signal reaches the whole step
    parent = opts.parent
    host.serve(lambda: parent is None or os.getppid() == parent, tick=PARENT_POLL)
    listener.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
