"""A check-in before torch starts: every participant (node or rank) reports to the master
within the join timeout, or the master names who never arrived. Standard library only, so it
costs milliseconds, not a torch import; it also proves MASTER_ADDR:MASTER_PORT is reachable.
"""

from __future__ import annotations

import contextlib
import errno
import hmac
import socket
import sys
import time
from collections.abc import Callable

from noderun.errors import RendezvousTimeoutError, UsageError
from noderun.first_lines import FirstLines, peer

_READ_TIMEOUT = 5.0
_MAX_LINE = 1024  # a HELLO is ~100 bytes
_RETRY_SECONDS = 0.1
_DENIED = "DENIED not this job's token"
_TOKEN_HINT = (
    "export the same NODERUN_JOB_TOKEN on every machine started by hand (or on none of them)"
)
_FIRST_RETRY_SECONDS = 0.005  # then x1.5 per refused try, up to _JOIN_RETRY_SECONDS
_JOIN_RETRY_SECONDS = 0.03  # node 0 listens a few tens of ms after the others start: see it soon


def listen(port: int, host: str, backlog: int = 16) -> socket.socket:
    """A socket listening on ``port`` on all interfaces, as torch's TCPStore will; a port in
    use is a usage error naming it."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind(("", port))
    except OSError as err:
        listener.close()
        if err.errno == errno.EADDRINUSE:
            raise UsageError(
                f"MASTER_PORT {port} is already in use on {host}",
                "pass another --master-port (or leave it out: it is derived from the job id)",
            ) from None
        raise
    listener.listen(backlog)
    return listener


class GateError(RendezvousTimeoutError):
    """The check-in failed: someone never arrived, or the master was unreachable."""


class GateRefusal(UsageError):
    """Participants were started with different command lines (``terms``): exit 2."""


def _send_line(conn: socket.socket, text: str) -> None:
    with contextlib.suppress(OSError):
        conn.sendall(text.replace("\n", " ").encode() + b"\n")


def _read_line(conn: socket.socket, timeout: float) -> str:
    """One ``\\n``-terminated line ('' on EOF, timeout, or past ``_MAX_LINE`` bytes)."""
    conn.settimeout(timeout)
    data = b""
    with contextlib.suppress(OSError):
        while not data.endswith(b"\n"):
            chunk = conn.recv(4096)
            if not chunk:
                break
            data += chunk
            if len(data) > _MAX_LINE:  # not one of ours: never buffer what a stranger sends
                return ""
    return data.decode(errors="replace").strip()


class NodeGate:
    """Participants ``0..total-1`` meet at ``addr:port``; participant 0 listens there.

    ``describe(i)`` names participant ``i`` in messages, e.g. ``node 1 (node2, ranks 2-3)``.
    """

    def __init__(
        self,
        *,
        index: int,
        total: int,
        addr: str,
        port: int,
        host: str,
        join_timeout: float,
        describe: Callable[[int], str],
        noun: str = "nodes",
        by_hand: bool = False,
        listener: socket.socket | None = None,
        token: str = "",
        log: Callable[[str], object] | None = None,
        terms: str = "",
    ) -> None:
        self.index = index
        self.total = total
        self.addr = addr
        self.port = port
        self.host = host
        self.join_timeout = join_timeout
        self.describe = describe
        self.noun = noun
        self.by_hand = by_hand  # nodes started one by one (noderun run --node-rank), not srun
        # participant 0 may bring its own listening socket: it stays open after the gate
        # (the step's store is served on it next, with no moment where the port is free)
        self.listener = listener
        # the job's token (the rank contract's): a HELLO without it is dropped and logged
        self.token = token
        self.log = log or (lambda line: sys.stderr.write(line + "\n"))
        # what every participant must agree on (e.g. ``--nproc-per-node=4 --mode=torchrun``):
        # a participant started otherwise is refused at the check-in, before torch starts
        self.terms = terms
        self.refusal: GateRefusal | None = None
        # check-ins dropped for their token: (peer address, index, host, token given) -> count
        self._turned_away: dict[tuple[str, str, str, str], int] = {}

    @property
    def where(self) -> str:
        return f"{self.addr}:{self.port}"

    def wait(self) -> None:
        """Return once all participants checked in; raise GateError/UsageError otherwise."""
        if self.total <= 1:
            return
        if self.index == 0:
            self._serve()
        else:
            self._join()

    def _listen(self) -> socket.socket:
        listener = self.listener or listen(self.port, self.host, max(self.total, 16))
        listener.settimeout(_RETRY_SECONDS)
        return listener

    def _serve(self) -> None:
        listener = self._listen()
        arrived: dict[int, tuple[socket.socket, str]] = {}
        deadline = time.monotonic() + self.join_timeout
        # every connection read at once: a silent one never holds the participants behind it
        hellos = FirstLines(listener, _MAX_LINE, _READ_TIMEOUT)
        try:
            while len(arrived) < self.total - 1:
                got = hellos.next(deadline)
                if got is None:
                    break
                conn, line, _ = got
                if line is None:
                    conn.close()  # not one of ours (a port scanner, an endless line, a silent one)
                    continue
                self._admit(conn, line.decode(errors="replace").strip(), arrived)
            if self.refusal is not None:
                for conn, _ in arrived.values():
                    _send_line(conn, f"REFUSE {self.refusal}")
                raise self.refusal
            if len(arrived) < self.total - 1:
                missing = [i for i in range(1, self.total) if i not in arrived]
                error = self._timeout_error(missing, arrived)
                for conn, _ in arrived.values():
                    _send_line(conn, f"ABORT {error}")
                raise error
            for conn, _ in arrived.values():
                _send_line(conn, "GO")
            for conn, _ in arrived.values():
                _read_line(conn, _READ_TIMEOUT)  # wait for the peer to close first: no TIME_WAIT
        finally:
            hellos.close()
            for conn, _ in arrived.values():
                conn.close()
            if listener is not self.listener:
                listener.close()

    def _admit(
        self, conn: socket.socket, hello: str, arrived: dict[int, tuple[socket.socket, str]]
    ) -> None:
        words = hello.split(maxsplit=4)
        if len(words) < 3 or words[0] != "HELLO" or not words[1].isdigit():
            conn.close()  # not one of ours (a port scanner, garbage, a half-open one): ignore it
            return
        given = words[3] if len(words) > 3 and words[3] != "-" else ""
        if self.token and not hmac.compare_digest(given, self.token):
            who = peer(conn)
            # said once per stranger: a participant with a wrong token retries until the end
            seen = (who.rpartition(":")[0], words[1], words[2], given)
            self._turned_away[seen] = self._turned_away.get(seen, 0) + 1
            if self._turned_away[seen] == 1:
                self.log(f"noderun.node: dropped a check-in from {who}: not this job's token")
            _send_line(conn, _DENIED)  # says nothing of the token, only that it is not this one
            conn.close()  # another job on the same port, or a stranger: never admitted
            return
        index, host, terms = int(words[1]), words[2], (words[4] if len(words) > 4 else "")
        if terms != self.terms and 0 < index < self.total and self.refusal is None:
            # the others are still let in, so every participant hears why and exits 2
            self.refusal = GateRefusal(
                f"{self.describe(index)} was started with `{terms or 'no options'}` but "
                f"{self.describe(0)} with `{self.terms or 'no options'}`",
                "give every node the same noderun options (srun runs one command line on "
                "every node)",
            )
        if not 0 < index < self.total or index in arrived:
            other = self.host if index == 0 else arrived[index][1] if index in arrived else "?"
            error = GateError(
                f"{self.describe(index) if index < self.total else f'participant {index}'} "
                f"checked in twice or out of range (from {host} and {other}) at {self.where}",
                "start exactly one `python -m noderun.node` per node (srun --ntasks-per-node=1)",
            )
            _send_line(conn, f"ABORT {error}")
            conn.close()
            for other_conn, _ in arrived.values():
                _send_line(other_conn, f"ABORT {error}")
            raise error
        arrived[index] = (conn, host)

    def _timeout_error(
        self, missing: list[int], arrived: dict[int, tuple[socket.socket, str]]
    ) -> GateError:
        shown = "; ".join(self.describe(i) for i in missing[:8])
        more = f" and {len(missing) - 8} more" if len(missing) > 8 else ""
        hosts = sorted({self.host, *(host for _, host in arrived.values())})
        denied = sorted(
            f"{self.describe(int(i)) if int(i) < self.total else f'participant {i}'} from {h}"
            for i, h in {(index, host) for _, index, host, _ in self._turned_away}
        )
        turned_away = f"; turned away (not this job's token): {'; '.join(denied[:4])}"
        token_hint = _TOKEN_HINT + "; " if denied and self.by_hand else ""
        return GateError(
            f"{self.total - len(missing)}/{self.total} {self.noun} checked in at {self.where} "
            f"within {self.join_timeout:g} s; never arrived: {shown}{more} "
            f"(arrived from {', '.join(hosts)}){turned_away if denied else ''}",
            token_hint
            + (
                "start `noderun run --nnodes N --node-rank R --master-addr NODE0 --master-port P "
                "SCRIPT` on every machine, R = 0..N-1, the same port everywhere"
                if self.by_hand
                else "every node must run under the same srun step "
                "(srun --nodes=N --ntasks-per-node=1 python -m noderun.node …)"
            )
            + "; a node that never started, or a wrong MASTER_ADDR on it, looks like this",
        )

    def _join(self) -> None:
        deadline = time.monotonic() + self.join_timeout
        last_error = "no answer"
        pause = _FIRST_RETRY_SECONDS  # node 0 is usually a few ms from listening: retry soon
        while time.monotonic() < deadline:
            try:
                conn = socket.create_connection(
                    (self.addr, self.port), timeout=max(deadline - time.monotonic(), 0.1)
                )
            except OSError as err:
                last_error = err.strerror or type(err).__name__
                time.sleep(pause)
                pause = min(pause * 1.5, _JOIN_RETRY_SECONDS)
                continue
            with conn:
                # HELLO index host token terms ("-": no token; terms: the rest of the line)
                hello = f"HELLO {self.index} {self.host} {self.token or '-'} {self.terms}"
                _send_line(conn, hello.rstrip())
                answer = _read_line(conn, self.join_timeout + _READ_TIMEOUT)
            if answer == "GO":
                return
            if answer.startswith("ABORT "):
                raise GateError(answer.removeprefix("ABORT "))
            if answer.startswith("REFUSE "):
                raise GateRefusal(answer.removeprefix("REFUSE "))
            if answer == _DENIED:
                said = (
                    f"node 0 at {self.where} turned {self.describe(self.index)} on {self.host} "
                    "away: this node's job token (NODERUN_JOB_TOKEN) is not node 0's, or it "
                    "has none"
                )
                if self.by_hand:  # the user's to fix, and nothing else will: say it now
                    raise GateRefusal(said, _TOKEN_HINT)
                last_error = said  # under srun: another job's node 0 on this port, maybe
                time.sleep(_RETRY_SECONDS)
                continue
            last_error = "the master closed the connection"
            time.sleep(_RETRY_SECONDS)
        raise GateError(
            f"{self.describe(self.index)} on {self.host} could not check in with the master at "
            f"{self.where} within {self.join_timeout:g} s ({last_error})",
            "node 0 was never started, or --master-addr/--master-port differ from node 0's"
            if self.by_hand
            else "node 0 never started its `python -m noderun.node` (was srun given fewer nodes?) "
            "or MASTER_ADDR is wrong; every node must run under the same srun step",
        )
