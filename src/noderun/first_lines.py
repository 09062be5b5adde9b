"""The first line of every connection to one of noderun's listeners, read side by side.

Node 0's check-in gate and doctor's probe port learn who connects from one short line (a
``HELLO`` with the job's token). Read one connection after the other, a connection that says
nothing would hold every one behind it for the whole read timeout, and a few hundred of them
(a port scanner, a stalled client of another job) would hold node 0 past its join timeout.
Here every connection is read at once, each with its own deadline, and none is buffered past
``limit`` bytes. Standard library only.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import time

CLOSED = "closed without a line"
SILENT = "said nothing within {timeout:g} s"
TOO_LONG = "sent more than {limit} bytes without a line"


def peer(conn: socket.socket, port: bool = True) -> str:
    """Who is at the other end of ``conn``: ``host:port`` (or the host alone), for the log."""
    try:
        address = conn.getpeername()[:2]
    except OSError:
        return "an unknown peer"
    return f"{address[0]}:{address[1]}" if port else str(address[0])


class FirstLines:
    """Accepts on ``listener`` and hands over each connection with its first line.

    ``next(until)`` returns ``(conn, line, "")`` for a connection whose line came (without its
    newline, the connection blocking again), ``(conn, None, why)`` for one that closed, went past
    ``limit`` or stayed silent past ``timeout`` (the caller drops it), or ``None`` when ``until``
    (a ``time.monotonic()`` value) passed first."""

    def __init__(self, listener: socket.socket, limit: int, timeout: float) -> None:
        self.listener = listener
        self.limit = limit
        self.timeout = timeout
        self._selector = selectors.DefaultSelector()
        self._reading: dict[socket.socket, tuple[bytes, float]] = {}  # so far, deadline
        self._ready: list[tuple[socket.socket, bytes | None, str]] = []
        listener.setblocking(False)
        self._selector.register(listener, selectors.EVENT_READ)

    def next(self, until: float) -> tuple[socket.socket, bytes | None, str] | None:
        while not self._ready:
            now = time.monotonic()
            if now >= until:
                return None
            first_due = min((due for _, due in self._reading.values()), default=until)
            for key, _ in self._selector.select(max(0.0, min(until, first_due) - now)):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                if sock is self.listener:
                    self._accept()
                else:
                    self._read(sock)
            now = time.monotonic()
            for conn, (_, due) in list(self._reading.items()):
                if now >= due:
                    self._done(conn, None, SILENT.format(timeout=self.timeout))
        return self._ready.pop(0)

    def _accept(self) -> None:
        with contextlib.suppress(BlockingIOError, InterruptedError):
            while True:  # everything waiting in the backlog
                conn, _ = self.listener.accept()
                conn.setblocking(False)
                self._reading[conn] = (b"", time.monotonic() + self.timeout)
                self._selector.register(conn, selectors.EVENT_READ)

    def _read(self, conn: socket.socket) -> None:
        data, due = self._reading[conn]
        try:
            chunk = conn.recv(self.limit + 1 - len(data))
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        data += chunk
        line, newline, _ = data.partition(b"\n")
        if newline:
            conn.setblocking(True)
            self._done(conn, line, "")
        elif not chunk:
            self._done(conn, None, CLOSED)
        elif len(data) > self.limit:
            self._done(conn, None, TOO_LONG.format(limit=self.limit))
        else:
            self._reading[conn] = (data, due)

    def _done(self, conn: socket.socket, line: bytes | None, why: str) -> None:
        del self._reading[conn]
        self._selector.unregister(conn)
        self._ready.append((conn, line, why))

    def close(self) -> None:
        """Close the connections still being read and forget the listener (left open)."""
        for conn in list(self._reading):
            self._selector.unregister(conn)
            conn.close()
        self._reading.clear()
        for conn, _, _ in self._ready:
            conn.close()
        self._ready.clear()
        self._selector.close()
