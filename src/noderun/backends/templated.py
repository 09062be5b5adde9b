"""Torchrun agents of simulated local nodes, forked from one node template per gang.

``noderun run --nnodes N`` on one machine starts N torchrun agents; exec'd, each imports torch
(about a CPU second). ``open_template`` starts ``noderun/node_template.py`` once, which imports
``torch.distributed.run`` once and forks each agent on request (why the shared import-time state
is safe, and what an exec'd agent has that a forked one has too: that file's docstring).
``NodeTemplate.spawn`` returns a ``TemplatedAgent``, which the supervisor uses as it uses a
``subprocess.Popen``: ``pid``, ``stdout``/``stderr`` (text pipes), ``poll``/``wait``/
``returncode`` (negative for a signal), ``send_signal``/``terminate``/``kill``.

Only local nodes whose argv is ``PYTHON -m torch.distributed.run …`` (one interpreter for all)
and whose environments differ from each other in ``NODERUN_*`` variables alone are forked, and
only where two or more are (one node gains nothing). ``NODERUN_NODE_TEMPLATE=0`` turns it off;
a template that cannot start or answer is given up and the agents are exec'd, silently.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import os
import signal
import socket
import subprocess
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from noderun import proc_guard
from noderun.plan import NodeCommand

SWITCH = "NODERUN_NODE_TEMPLATE"  # "0": exec every agent, as before
TEMPLATE = str(Path(__file__).resolve().parents[1] / "node_template.py")
MODULE = "torch.distributed.run"
# the template imports torch before it answers: a loaded 2-core machine can take this long
READY_SEC = 120.0
SPAWN_SEC = 30.0
MAX_MESSAGE = 1 << 16
PER_NODE_PREFIX = "NODERUN_"  # the only variables a forked agent's environment may add or change


def enabled(environ: Mapping[str, str] | None = None) -> bool:
    return (os.environ if environ is None else environ).get(SWITCH, "1").strip() != "0"


def is_agent(node: NodeCommand) -> bool:
    """A local node whose agent is ``PYTHON -m torch.distributed.run …``."""
    return not node.remote and not node.stdin_env and list(node.argv[1:3]) == ["-m", MODULE]


def shared(envs: Sequence[Mapping[str, str]]) -> dict[str, str]:
    """The variables every environment has, with the same value."""
    first, *rest = envs
    return {k: v for k, v in first.items() if all(e.get(k) == v for e in rest)}


def forkable(env: Mapping[str, str], base: Mapping[str, str]) -> bool:
    """The agent may be forked from a template started with ``base``: its environment differs
    only in noderun's own variables, and its stdio is unbuffered (the template's objects)."""
    differ = {k for k in env.keys() | base.keys() if env.get(k) != base.get(k)}
    return bool(env.get("PYTHONUNBUFFERED")) and all(k.startswith(PER_NODE_PREFIX) for k in differ)


class _Exit:
    def __init__(self) -> None:
        self.done = threading.Event()
        self.code: int | None = None

    def set(self, code: int) -> None:
        if not self.done.is_set():
            self.code = code
            self.done.set()


class TemplatedAgent:
    """A forked agent, as much of ``subprocess.Popen[str]`` as the supervisor uses."""

    def __init__(self, argv: Sequence[str], pid: int, out: int, err: int, end: _Exit) -> None:
        self.args = list(argv)
        self.pid = pid
        self.stdin: IO[str] | None = None  # local nodes read nothing
        # as Popen(text=True) opens its pipes: buffered, locale encoding, universal newlines
        self.stdout = io.TextIOWrapper(open(out, "rb", -1))  # noqa: SIM115 - the reader closes
        self.stderr = io.TextIOWrapper(open(err, "rb", -1))  # noqa: SIM115
        self.returncode: int | None = None
        self._end = end

    def poll(self) -> int | None:
        if self.returncode is None and self._end.done.is_set():
            self.returncode = self._end.code
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self._end.done.wait(timeout):
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        code = self.poll()
        assert code is not None
        return code

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signum)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class NodeTemplate:
    """The template process of one gang and the thread that reads its reports."""

    def __init__(self, python: str, title: Sequence[str], env: Mapping[str, str]) -> None:
        self._sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.proc = subprocess.Popen(
                [python, TEMPLATE, *title],
                stdin=theirs.fileno(),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env=dict(env),
                start_new_session=True,  # no terminal signal reaches it
                preexec_fn=proc_guard.die_with_parent_hook(),  # SIGKILLed with noderun
            )
        finally:
            theirs.close()
        self._lock = threading.Lock()
        self._ids = itertools.count()
        self._pending: dict[int, tuple[threading.Event, dict[str, Any]]] = {}
        self._exits: dict[int, _Exit] = {}
        self._gone = False
        try:
            self._sock.settimeout(READY_SEC)
            hello = json.loads(self._sock.recv(MAX_MESSAGE) or b"{}")
            if "ready" not in hello:
                raise OSError(hello.get("error", "the node template ended before it was ready"))
            self._sock.settimeout(None)
        except (OSError, ValueError):
            self.close()
            raise
        self._reader = threading.Thread(target=self._read, name="node-template", daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _read(self) -> None:
        while True:
            try:
                data = self._sock.recv(MAX_MESSAGE)
            except OSError:
                data = b""
            if not data:
                break
            message = json.loads(data)
            with self._lock:
                if "id" in message:
                    event, slot = self._pending.pop(message["id"], (None, {}))
                    if "pid" in message:
                        self._exits[message["pid"]] = _Exit()
                    slot.update(message)
                    if event is not None:
                        event.set()
                elif "pid" in message:
                    self._exits.setdefault(message["pid"], _Exit()).set(message["code"])
        with self._lock:  # its children die of their parent-death signal with it
            self._gone = True
            for end in self._exits.values():
                end.set(-signal.SIGKILL)
            for event, slot in self._pending.values():
                slot["error"] = "the node template ended"
                event.set()
            self._pending.clear()

    def spawn(self, argv: Sequence[str], env: Mapping[str, str], cwd: str) -> TemplatedAgent:
        """Fork the agent ``argv`` with exactly ``env``; OSError when the template cannot."""
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        devnull = os.open(os.devnull, os.O_RDONLY)
        event, slot = threading.Event(), dict[str, Any]()
        try:
            with self._lock:
                if self._gone:
                    raise OSError("the node template ended")
                ident = next(self._ids)
                self._pending[ident] = (event, slot)
            request = {"id": ident, "argv": list(argv), "env": dict(env), "cwd": cwd}
            socket.send_fds(self._sock, [json.dumps(request).encode()], [devnull, out_w, err_w])
        except BaseException:
            for fd in (out_r, err_r):
                os.close(fd)
            raise
        finally:
            for fd in (devnull, out_w, err_w):
                os.close(fd)
        if not event.wait(SPAWN_SEC) or "pid" not in slot:
            for fd in (out_r, err_r):
                os.close(fd)
            raise OSError(slot.get("error", "the node template did not answer"))
        pid = slot["pid"]
        with self._lock:
            end = self._exits[pid]
        return TemplatedAgent(argv, pid, out_r, err_r, end)

    def close(self) -> None:
        """End the template (its agents, if any were left, die with it) and reap it."""
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        reader = getattr(self, "_reader", None)
        if reader is not None:
            reader.join(timeout=5)
        self._sock.close()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def open_template(
    nodes: Sequence[NodeCommand], envs: Mapping[int, Mapping[str, str]]
) -> tuple[NodeTemplate | None, set[int]]:
    """A template for the nodes that can be forked, and their node ranks; (None, set()) when
    fewer than two can, it is switched off, or it could not start (they are exec'd then)."""
    if not enabled():
        return None, set()
    agents = [n for n in nodes if is_agent(n)]
    agents = [n for n in agents if n.argv[0] == agents[0].argv[0]] if agents else []
    if len(agents) < 2:
        return None, set()
    base = shared([envs[n.node_rank] for n in agents])
    ranks = {n.node_rank for n in agents if forkable(envs[n.node_rank], base)}
    if len(ranks) < 2:
        return None, set()
    # the longest argv: each agent writes its own over the template's (node_template._retitle)
    title = max((n.argv for n in agents if n.node_rank in ranks), key=lambda a: len("".join(a)))
    try:
        return NodeTemplate(title[0], title[1:], base), ranks
    except (OSError, ValueError, subprocess.SubprocessError):
        return None, set()
