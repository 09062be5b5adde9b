"""What a token-checking front before torch's TCPStore would cost each store call (issue 29).

The design weighed for srun mode (docs/reliability.md, "the srun-mode store"): torch's store on
node 0's loopback, a front on the public port that admits a connection only after a line with
the job's token, and on every rank a loopback forwarder that adds the token. A store call then
crosses two relays instead of none. This measures that, on one machine: the same client does
``set`` + ``get`` pairs against the store directly and through a forwarder and a front (both
selector loops in a separate process, as they would be, so they never share the client's GIL).

    python bench/store_front_cost.py [--pairs 2000] [--repeats 5] [--world 4]

Prints the median microseconds per call each way and the difference, and the slowest of
``--world`` ranks' store connect + gloo ``init_process_group`` + all_reduce + barrier each
way. A prototype relay for
the measurement only: noderun does not ship it (see docs/reliability.md for why).
"""

from __future__ import annotations

import argparse
import datetime
import multiprocessing
import selectors
import socket
import statistics
import time
from typing import Any

TOKEN = b"bench-token"


def _relay(public: socket.socket, target: tuple[str, int], prefix: bytes, expect: bytes) -> None:
    """Accept on ``public``; a connection that must first say ``expect`` (the front) is read up
    to its newline; then connect to ``target``, send ``prefix`` (the forwarder's token line),
    and copy bytes both ways."""
    selector = selectors.DefaultSelector()
    public.setblocking(False)
    selector.register(public, selectors.EVENT_READ, "accept")
    peer: dict[socket.socket, socket.socket] = {}
    pending: dict[socket.socket, bytes] = {}
    while True:
        for key, _ in selector.select():
            sock = key.fileobj
            assert isinstance(sock, socket.socket)
            if key.data == "accept":
                conn, _ = sock.accept()
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                if expect:
                    pending[conn] = b""
                    selector.register(conn, selectors.EVENT_READ, "hello")
                else:
                    _pair(conn, target, prefix, selector, peer)
            elif key.data == "hello":
                data = pending[sock] + sock.recv(256)
                if b"\n" not in data:
                    pending[sock] = data
                    continue
                del pending[sock]
                selector.unregister(sock)
                line, _, rest = data.partition(b"\n")
                if line != expect:
                    sock.close()
                    continue
                other = _pair(sock, target, b"", selector, peer)
                if rest:
                    other.sendall(rest)
            else:
                try:
                    data = sock.recv(1 << 16)
                except OSError:
                    data = b""
                if data:
                    peer[sock].sendall(data)
                    continue
                other = peer.pop(sock)
                peer.pop(other, None)
                for s in (sock, other):
                    selector.unregister(s)
                    s.close()


def _pair(
    conn: socket.socket,
    target: tuple[str, int],
    prefix: bytes,
    selector: selectors.BaseSelector,
    peer: dict[socket.socket, socket.socket],
) -> socket.socket:
    out = socket.create_connection(target)
    out.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if prefix:
        out.sendall(prefix)
    peer[conn], peer[out] = out, conn
    selector.register(conn, selectors.EVENT_READ, "copy")
    selector.register(out, selectors.EVENT_READ, "copy")
    return out


def _relays(store_port: int, front: socket.socket, forwarder: socket.socket) -> None:
    import threading

    threading.Thread(
        target=_relay, args=(front, ("127.0.0.1", store_port), b"", TOKEN), daemon=True
    ).start()
    front_port = front.getsockname()[1]
    _relay(forwarder, ("127.0.0.1", front_port), TOKEN + b"\n", b"")


def _per_call(store: object, pairs: int) -> float:
    started = time.perf_counter()
    for i in range(pairs):
        store.set(f"k{i % 64}", b"v" * 64)  # type: ignore[attr-defined]
        store.get(f"k{i % 64}")  # type: ignore[attr-defined]
    return (time.perf_counter() - started) / (2 * pairs) * 1e6


def _rank(rank: int, world: int, port: int, prefix: str, out: Any, ready: Any) -> None:
    import torch
    import torch.distributed as dist

    wait = datetime.timedelta(seconds=60)
    ready.wait()  # every rank imported torch: time what the store serves, not the imports
    started = time.perf_counter()
    store = dist.TCPStore("127.0.0.1", port, None, False, wait, wait_for_workers=False)
    dist.init_process_group("gloo", store=dist.PrefixStore(prefix, store), rank=rank,
                            world_size=world)  # fmt: skip
    dist.all_reduce(torch.ones(1))
    dist.barrier()
    out.put(time.perf_counter() - started)
    dist.destroy_process_group()


def _init_seconds(port: int, world: int) -> float:
    """The slowest rank's store connect + gloo init + all_reduce + barrier, ``world`` ranks."""
    ctx = multiprocessing.get_context("spawn")  # never fork a process that serves a store
    out = ctx.Queue()
    ready = ctx.Barrier(world)
    prefix = f"init-{time.monotonic_ns()}"  # each init its own keys: one store serves them all
    ranks = [
        ctx.Process(target=_rank, args=(r, world, port, prefix, out, ready)) for r in range(world)
    ]
    for proc in ranks:
        proc.start()
    took = max(out.get(timeout=120) for _ in ranks)
    for proc in ranks:
        proc.join()
    return took


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--world", type=int, default=4, help="ranks of the init measure")
    args = parser.parse_args()
    import torch.distributed as dist

    wait = datetime.timedelta(seconds=30)
    server = dist.TCPStore("127.0.0.1", 0, None, True, wait, wait_for_workers=False)
    front, forwarder = (
        socket.create_server(("127.0.0.1", 0)),
        socket.create_server(("127.0.0.1", 0)),
    )
    relays = multiprocessing.get_context("fork").Process(
        target=_relays, args=(server.port, front, forwarder), daemon=True
    )
    relays.start()
    direct = dist.TCPStore("127.0.0.1", server.port, None, False, wait, wait_for_workers=False)
    relayed = dist.TCPStore(
        "127.0.0.1", forwarder.getsockname()[1], None, False, wait, wait_for_workers=False
    )
    both: dict[str, list[float]] = {"direct": [], "relayed": []}
    for _ in range(args.repeats):
        both["direct"].append(_per_call(direct, args.pairs))
        both["relayed"].append(_per_call(relayed, args.pairs))
    inits: dict[str, list[float]] = {"direct": [], "relayed": []}
    for _ in range(args.repeats):
        inits["direct"].append(_init_seconds(server.port, args.world))
        inits["relayed"].append(_init_seconds(forwarder.getsockname()[1], args.world))
    relays.terminate()
    for way, took in inits.items():
        shown = ", ".join(f"{x * 1000:.0f}" for x in took)
        print(f"{way:8s} {args.world} ranks: init+all_reduce+barrier "
              f"{statistics.median(took) * 1000:6.1f} ms median (runs: {shown})")  # fmt: skip
    d, r = (statistics.median(both[k]) for k in ("direct", "relayed"))
    print(f"direct  {d:7.1f} us/call  (runs: {', '.join(f'{x:.0f}' for x in both['direct'])})")
    print(f"relayed {r:7.1f} us/call  (runs: {', '.join(f'{x:.0f}' for x in both['relayed'])})")
    print(f"two relays add {r - d:.1f} us per store call (median of {args.repeats})")


if __name__ == "__main__":
    main()
