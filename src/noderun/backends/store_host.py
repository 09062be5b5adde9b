"""The rendezvous store of an srun-mode step: torch's own TCPStore on the gate's socket.

One task per rank under srun has no torchrun agent, so rank 0's ``init_process_group`` would
start torch's TCPStore server itself, binding MASTER_PORT only once it has imported torch; a
rank that got there first is refused and torch's client retries after 0.25-0.75 s (measured on
the lab, 2 nodes x 2 ranks: 0.2-0.5 s lost in most jobs). Here the port never stops listening:
node 0's rank-0 task keeps the check-in gate's listening socket, and when the rank's script
imports ``torch.distributed`` (not before: variables the script sets before importing torch
still take effect) torch serves on it, ``TCPStore(..., is_master=True, master_listen_fd=fd)``.
A rank that connects earlier waits in the listen backlog instead of being refused. Every rank,
rank 0 too, is a client (``TORCHELASTIC_USE_AGENT_STORE=True``), as under torchrun's agent.

A torch whose TCPStore does not take ``master_listen_fd`` (the feature is asked of torch, not
of a version list) gets the port closed and bound again by an ordinary master store: the early
ranks' connections are refused once and retried, as without this module.

Standard library only: ``rank_entry.py`` loads it by path, before anything of noderun.
"""

from __future__ import annotations

import contextlib
import datetime
import importlib.abc
import importlib.machinery
import os
import socket
import sys
import types
from collections.abc import Callable, Sequence
from typing import Any

FD_VARIABLE = "NODERUN__STORE_FD"  # the listening socket rank 0 inherits from the node entry
WATCHED = "torch.distributed"
_served: list[Any] = []  # the store lives as long as rank 0's process, as torch's own would


def hand_over(listener: socket.socket) -> dict[str, str]:
    """The variables that give ``listener`` to the rank (inherited across exec); the caller
    must not close it."""
    listener.setblocking(True)  # as a freshly created socket is (the gate's polled it)
    fd = listener.detach()
    os.set_inheritable(fd, True)
    return {FD_VARIABLE: str(fd)}


def serve(
    dist: Any, fd: int, port: int, timeout: float = 1800.0, said: Callable[[str], None] = print
) -> Any:
    """torch's master TCPStore on the listening socket ``fd`` (torch's libuv server accepts
    the connections already waiting); where torch cannot take a socket, on ``port`` itself.
    Either listens on every interface; ``127.0.0.1`` is only where the master's own client
    connects."""
    wait = datetime.timedelta(seconds=timeout)
    try:
        store = dist.TCPStore(
            "127.0.0.1", port, None, True, wait, wait_for_workers=False, master_listen_fd=fd
        )
    except TypeError:  # this torch's TCPStore has no master_listen_fd
        os.close(fd)
        said(f"noderun: this torch cannot serve a listening socket; binding port {port} again")
        store = dist.TCPStore("127.0.0.1", port, None, True, wait, wait_for_workers=False)
    _served.append(store)
    return store


class _ServeAfterImport(importlib.abc.MetaPathFinder):
    """Runs ``then(module)`` right after ``torch.distributed`` finished importing."""

    def __init__(self, then: Callable[[types.ModuleType], None]) -> None:
        self.then = then

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != WATCHED:
            return None
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or not isinstance(spec.loader, importlib.abc.Loader):
            return spec
        loader, then = spec.loader, self.then
        original = loader.exec_module

        def exec_module(module: types.ModuleType) -> None:
            original(module)
            then(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def serve_on_import(
    environ: dict[str, str] | os._Environ[str], stamp: Callable[[str], None]
) -> bool:
    """In rank 0 of an srun-mode step: take the socket named by ``NODERUN__STORE_FD`` (the
    variable is removed: the script's children must not think they own it) and serve torch's
    store on it once the script imports ``torch.distributed``. Whether a socket was given."""
    value = environ.pop(FD_VARIABLE, None)
    if not value:
        return False
    fd = int(value)
    os.set_inheritable(fd, False)
    port = int(environ.get("MASTER_PORT") or 0)

    def then(module: types.ModuleType) -> None:
        try:
            serve(module, fd, port, said=lambda text: print(text, file=sys.stderr))
        except Exception as err:  # the script's own init then says what is wrong
            print(f"noderun: the rendezvous store did not start: {err}", file=sys.stderr)
            return
        stamp("store_hosted")

    if WATCHED in sys.modules:  # already imported (never under the node entry)
        then(sys.modules[WATCHED])
    else:
        sys.meta_path.insert(0, _ServeAfterImport(then))
    return True
