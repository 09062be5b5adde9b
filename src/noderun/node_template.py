"""A node template: imports ``torch.distributed.run`` once, then forks one torchrun agent per
simulated local node on request (``noderun run --nnodes N`` on one machine).

Every agent exec'd as ``python -m torch.distributed.run …`` spends about a CPU second importing
torch before it does anything; N simulated nodes pay it N times. The launcher
(``noderun/backends/templated.py``) starts this file once per gang, by path and standard
library only until it imports torch, single-threaded:

    python /…/noderun/node_template.py -m torch.distributed.run ARGS…   (node 0's agent argv)

(any ``-m MODULE`` works: the tests use a small one; noderun forks torchrun agents only).

Its stdin is one end of a ``SOCK_SEQPACKET`` socket pair. It answers ``{"ready": pid}`` once
``torch.distributed.run`` is imported (or ``{"error": text}``), then serves requests
``{"id", "argv", "env", "cwd"}`` that carry three descriptors (stdin, stdout, stderr of the agent,
``SCM_RIGHTS``): it forks, answers ``{"id", "pid"}``, and when a child ends ``{"pid", "code"}``
(``subprocess``'s returncode: negative for a signal). It leaves when the socket closes (its
children then die of their parent-death signal). It ignores SIGTERM/SIGINT/SIGHUP: the gang's
teardown signals the agents, and the template must outlive them to report their exits; it dies
with the launcher (``PR_SET_PDEATHSIG``, set by the launcher) and is otherwise closed by it.

A forked agent is what ``python -m torch.distributed.run ARGV`` would be, as far as the launcher
and the ranks can tell: a new session (``setsid``), a parent-death signal (SIGKILL when the
template, i.e. the launcher, dies), the three descriptors on 0/1/2, the requested working
directory, ``os.environ`` replaced by the requested environment, ``sys.argv``/``sys.path[0]``/a
fresh ``__main__`` as ``-m`` sets them (the rank entry's own ``-m`` code), signal dispositions as
a fresh interpreter has them, and its exit status as the interpreter would report it (the rank
entry's ``_finish``: threads joined, atexit run, stdio flushed, a signal death repeated).

Why the shared import-time state is safe: only the agent shares it. torch, numpy and their
libraries read some environment variables once, at import (``LOGLEVEL`` for torchelastic's
loggers, ``TORCH_CPP_LOG_LEVEL``, ``OMP_NUM_THREADS``/``OPENBLAS_NUM_THREADS``, locale and
``PYTHON*`` variables for the interpreter and its stdio). The template is started with the
environment every agent of the gang would get except for the variables that differ between
nodes, and the launcher forks an agent here only when those differences are all noderun's own
``NODERUN_*`` variables, which neither torch nor the interpreter reads, and when the
environment makes stdio unbuffered (``PYTHONUNBUFFERED``, as the plans set it: the template's
stdio objects are reused). The ranks, where the user's program and its CUDA/NCCL/OMP settings
live, are still exec'd fresh by the agent with the node's environment. Anything else (SSH nodes,
other argv, a differing variable) is exec'd as before.

What differs from an exec'd agent: ``/proc/PID/environ`` shows the template's (the gang's
shared environment, without the per-node ``NODERUN_*`` variables: a look from outside at an
agent's environment finds the run directory but no node rank); ``/proc/PID/cmdline`` is the
agent's own argv, written over the template's in place, followed by NUL padding (``ps`` shows
trailing blanks); import-time output (warnings) is printed by the template once and replayed
into each agent's stdout/stderr when it starts.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.util
import json
import os
import select
import signal
import socket
import sys
import tempfile
import traceback
from collections.abc import Callable, Iterator
from typing import Any, NoReturn

HERE = os.path.dirname(os.path.abspath(__file__))
MAX_MESSAGE = 1 << 22  # a request: argv + a whole environment
CTL_FD = 0  # the launcher hands the socket over as stdin
IGNORED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def _load(name: str) -> Any:
    """A sibling file loaded by path (nothing of the noderun package is imported)."""
    spec = importlib.util.spec_from_file_location(f"_noderun_template_{name}", f"{HERE}/{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _send(ctl: socket.socket, message: dict[str, Any]) -> None:
    with contextlib.suppress(OSError):
        ctl.send(json.dumps(message).encode())


def _import_quietly(module: str) -> tuple[bytes, bytes]:
    """Import ``module`` (torch's launcher) with fds 1 and 2 captured: what it printed
    (warnings), to be replayed into every agent's own streams."""
    saved = [os.dup(1), os.dup(2)]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        try:
            os.dup2(out.fileno(), 1)
            os.dup2(err.fileno(), 2)
            try:
                __import__(module)
                # what it imported stays; the module itself runs fresh as each agent's __main__,
                # as `-m` runs it (no copy of it in sys.modules, none on its package)
                sys.modules.pop(module)
                package, _, name = module.rpartition(".")
                if package:
                    delattr(sys.modules[package], name)
            finally:
                for stream in (sys.stdout, sys.stderr):
                    with contextlib.suppress(OSError, ValueError, AttributeError):
                        stream.flush()
                os.dup2(saved[0], 1)
                os.dup2(saved[1], 2)
        finally:
            for fd in saved:
                os.close(fd)
        out.seek(0)
        err.seek(0)
        return out.read(), err.read()


class _Template:
    """What every forked agent starts from: the captured import output and the rank entry's
    ``-m`` setup and exit (loaded by path before any fork)."""

    def __init__(self, ctl: socket.socket, module: str, replay: tuple[bytes, bytes]) -> None:
        self.ctl = ctl
        self.module = module
        self.replay = replay
        self.pid = os.getpid()
        self.entry = _load("rank_entry")
        self.guard = _load("proc_guard")  # parent-death signal and reaping, as the launcher's


def _retitle(argv: list[str]) -> None:
    """Show ``argv`` as this process's command line (``ps``, ``/proc/PID/cmdline``): written
    over the template's own argument strings, in place (they are as long as the longest agent's
    argv: the launcher starts the template with it), NUL-padded. Best effort."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        start, end = int(fields[45]), int(fields[46])  # arg_start, arg_end (stat fields 48, 49)
        data = b"\0".join(os.fsencode(arg) for arg in argv)[: end - start - 1]
        ctypes.memmove(start, data.ljust(end - start, b"\0"), end - start)


def _agent(
    template: _Template, request: dict[str, Any], fds: list[int], closing: list[int]
) -> NoReturn:
    """The forked child: become the node's agent and never come back to the serve loop."""
    status = 1
    entry = template.entry
    try:
        for fd in closing:
            with contextlib.suppress(OSError):
                os.close(fd)
        signal.set_wakeup_fd(-1)
        for signum in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.setsid()
        # the template goes with the launcher, the agent with it
        template.guard.die_with_parent(signal.SIGKILL)
        if os.getppid() != template.pid:  # it went before the request took effect
            os.kill(os.getpid(), signal.SIGKILL)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        for fd in set(fds):
            if fd > 2:
                os.close(fd)
        _retitle(request["argv"])
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        for fd, data in ((1, template.replay[0]), (2, template.replay[1])):
            if data:
                with contextlib.suppress(OSError):
                    os.write(fd, data)
        argv = list(request["argv"])
        if argv[1:3] != ["-m", template.module]:
            raise ValueError(f"not an agent of {template.module}: {argv[:3]}")
        sys.argv = argv[2:]  # [MODULE, ARGS…]; -m's setup puts the module's path first
        code, module = entry._module_code(template.module)
        try:
            exec(code, module.__dict__)
            status = 0
        except SystemExit as stop:
            status = entry._exit_status(stop.code)
        except BaseException as err:  # as the interpreter reports an uncaught exception
            tb = err.__traceback__
            while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
                tb = tb.tb_next
            sys.excepthook(type(err), err.with_traceback(tb), tb)
            status = -signal.SIGINT if isinstance(err, KeyboardInterrupt) else 1
        entry._finish(status)
    except BaseException:
        with contextlib.suppress(BaseException):
            traceback.print_exc()
    os._exit(status if status > 0 else 1)


def serve(template: _Template) -> None:
    """Fork an agent per request, report each child's end; until the socket closes."""
    ctl = template.ctl
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    os.set_blocking(wake_r, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    while True:
        readable, _, _ = select.select([ctl.fileno(), wake_r], [], [])
        if wake_r in readable:
            with contextlib.suppress(OSError):
                os.read(wake_r, 4096)
        _reap(ctl, template.guard.reap_exited)
        if ctl.fileno() not in readable:
            continue
        try:
            data, fds, _, _ = socket.recv_fds(ctl, MAX_MESSAGE, 3)
        except InterruptedError:
            continue
        except OSError:
            return
        if not data:
            return  # the launcher closed: its agents are gone or go with us
        try:
            request = json.loads(data)
            if len(fds) != 3:
                raise ValueError(f"{len(fds)} descriptors, not 3")
            pid = os.fork()
        except (ValueError, OSError) as err:
            for fd in fds:
                os.close(fd)
            ident = request.get("id") if isinstance(request, dict) else None
            _send(ctl, {"id": ident, "error": str(err)})
            continue
        if pid == 0:
            _agent(template, request, fds, [ctl.fileno(), wake_r, wake_w])
        for fd in fds:
            os.close(fd)
        _send(ctl, {"id": request["id"], "pid": pid})


def _reap(ctl: socket.socket, reap_exited: Callable[[], Iterator[tuple[int, int]]]) -> None:
    for pid, status in reap_exited():
        _send(ctl, {"pid": pid, "code": os.waitstatus_to_exitcode(status)})


def main() -> None:
    for signum in IGNORED:
        signal.signal(signum, signal.SIG_IGN)
    ctl = socket.socket(fileno=os.dup(CTL_FD))
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, CTL_FD)  # the socket is held by ``ctl`` alone
    os.close(devnull)
    sys.path[0] = os.getcwd()  # what `python -m` puts first (not this file's folder)
    try:
        if sys.argv[1:2] != ["-m"] or len(sys.argv) < 3:
            raise ValueError("usage: node_template.py -m MODULE [ARGS…]")
        module = sys.argv[2]
        template = _Template(ctl, module, _import_quietly(module))
    except BaseException as err:  # any failure: the launcher execs its agents instead
        _send(ctl, {"error": f"{type(err).__name__}: {err}"})
        return
    _send(ctl, {"ready": os.getpid()})
    serve(template)


if __name__ == "__main__":
    main()
