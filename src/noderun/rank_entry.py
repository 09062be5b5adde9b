"""Run one rank's script exactly as ``python SCRIPT ARGS`` would, then leave without finalizing.

torch 2.13's gloo backend aborts in interpreter finalization about half the time after a
script finished its work (``terminate called without an active exception``, SIGABRT), even
after ``destroy_process_group()``: a finished run would be reported as a crashed rank. This
entry runs the script as ``__main__`` (same ``sys.argv``, ``__file__``, ``sys.path[0]``, atexit
handlers, exit status, traceback), then does what finalization would do for the user (waits for
non-daemon threads, runs atexit handlers, flushes stdio) and leaves with ``os._exit(status)``.

    python /…/noderun/rank_entry.py SCRIPT [ARGS…]
    python /…/noderun/rank_entry.py -m MODULE [ARGS…]
    python /…/noderun/rank_entry.py --no-python EXECUTABLE [ARGS…]   (execs it, as torchrun does)

It is started by path, not with ``-m noderun…``, so nothing of noderun (or torch) is imported
before the user's script: environment variables the script sets before importing torch still
take effect. Standard library only.
"""

from __future__ import annotations

import atexit
import builtins
import contextlib
import importlib.machinery
import importlib.util
import os
import runpy
import signal
import sys
import threading
import time
import types
from types import TracebackType
from typing import NoReturn

ENTRY = os.path.abspath(__file__)


def _exit_status(code: object) -> int:
    """What the interpreter makes of ``SystemExit(code)`` (printing a message code as it does)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _user_traceback(tb: TracebackType | None) -> TracebackType | None:
    """The traceback from the user's first frame on: this entry's frames dropped."""
    while tb is not None and tb.tb_frame.f_code.co_filename == ENTRY:
        tb = tb.tb_next
    return tb


def _main_module(**attributes: object) -> types.ModuleType:
    """A fresh ``__main__`` that stays in sys.modules until the process ends: the script's
    globals are never torn down before ``os._exit`` (their destructors are what aborts)."""
    module = types.ModuleType("__main__")
    module.__dict__.update(__builtins__=builtins, __cached__=None, **attributes)
    sys.modules["__main__"] = module
    return module


def _script_code(script: str) -> tuple[types.CodeType, types.ModuleType]:
    path = os.path.abspath(script)
    with open(path, "rb") as f:  # compile() honours a coding cookie in the bytes
        code = compile(f.read(), path, "exec", dont_inherit=True)
    loader = importlib.machinery.SourceFileLoader("__main__", path)
    sys.argv[0] = script
    sys.path[0] = os.path.dirname(os.path.realpath(script))  # as `python SCRIPT` does
    return code, _main_module(__file__=path, __loader__=loader, __package__=None, __spec__=None)


def _module_code(name: str) -> tuple[types.CodeType, types.ModuleType]:
    sys.path[0] = os.getcwd()  # what `python -m` puts first
    details = runpy._get_module_details  # type: ignore[attr-defined]
    name, spec, code = details(name, runpy._Error)  # type: ignore[attr-defined]
    sys.argv[0] = spec.origin or name
    module = _main_module(
        __file__=spec.origin, __loader__=spec.loader, __package__=spec.parent, __spec__=spec
    )
    return code, module


# the launcher -> rank contract's names (noderun/topology/contract.py; a test keeps them equal),
# then the option-style names an older launcher set
RUN_DIR_VARIABLES = ("NODERUN__RUN_DIR", "NODERUN_RUN_DIR")
# noderun restarts the whole gang itself; torchrun's agent only knows its own (zero) restarts
RESTART_VARIABLES = {
    ("NODERUN__RESTART_COUNT", "NODERUN_RESTART_COUNT"): "TORCHELASTIC_RESTART_COUNT",
    ("NODERUN__MAX_RESTARTS", "NODERUN_MAX_RESTARTS"): "TORCHELASTIC_MAX_RESTARTS",
}


def _first(names: tuple[str, ...]) -> str | None:
    return next((os.environ[name] for name in names if os.environ.get(name)), None)


def _restart_variables() -> None:
    """TORCHELASTIC_RESTART_COUNT/MAX_RESTARTS as torchrun would set them for noderun's restarts."""
    for ours, torchrun in RESTART_VARIABLES.items():
        value = _first(ours)
        if value:
            os.environ[torchrun] = value


def _exec(argv: list[str]) -> int:
    """``--no-python EXECUTABLE ARGS``: become the executable (PATH searched, as torchrun's
    Popen does); 127 with the shell's words when it cannot be run."""
    try:
        os.execvp(argv[0], argv)
    except OSError as err:
        print(f"{argv[0]}: cannot execute: {err.strerror}", file=sys.stderr)
    return 127


def _run(argv: list[str]) -> int:
    _restart_variables()
    is_module = bool(argv) and argv[0] in ("-m", "--module")
    is_exec = bool(argv) and argv[0] == "--no-python"
    if not argv or ((is_module or is_exec) and len(argv) < 2):
        print(
            "usage: rank_entry.py SCRIPT [ARGS…] | -m MODULE [ARGS…] | --no-python EXECUTABLE "
            "[ARGS…]",
            file=sys.stderr,
        )
        return 2
    if is_exec:
        sys.stdout.flush()
        return _exec(argv[1:])
    sys.argv = argv[1:] if is_module else list(argv)
    try:
        code, module = _module_code(argv[1]) if is_module else _script_code(argv[0])
    except OSError as err:  # as `python SCRIPT` says it
        print(f"{sys.executable}: can't open file {argv[0]!r}: {err}", file=sys.stderr)
        return 2
    except runpy._Error as err:  # type: ignore[attr-defined]  # as `python -m MODULE` says it
        print(f"{sys.executable}: {err}", file=sys.stderr)
        return 1
    try:
        exec(code, module.__dict__)
    except SystemExit as stop:
        return _exit_status(stop.code)
    except BaseException as err:  # the interpreter's own handling of an uncaught exception
        _record_error(err)
        tb = _user_traceback(err.__traceback__)
        sys.excepthook(type(err), err.with_traceback(tb), tb)
        # python dies of SIGINT after an uncaught KeyboardInterrupt
        return -signal.SIGINT if isinstance(err, KeyboardInterrupt) else 1
    return 0


def _record_error(error: BaseException) -> None:
    """A plain script's uncaught exception leaves ``logs/rank<R>.error.json`` too (noderun.init()
    scripts write it from their own hook), so the launcher names the rank that failed first,
    not a peer that lost its connection. The script has ended: importing noderun is harmless."""
    if isinstance(error, KeyboardInterrupt) or not _first(RUN_DIR_VARIABLES):
        return
    with contextlib.suppress(Exception):
        from noderun import failures

        failures.record(error)


def _finish(status: int) -> None:
    """Interpreter shutdown up to (not including) finalization, then leave with ``status``."""
    with contextlib.suppress(BaseException):  # a thread's failure is printed by threading
        threading._shutdown()  # type: ignore[attr-defined]  # join non-daemon threads, as exit does
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        with contextlib.suppress(OSError, ValueError, AttributeError):
            stream.flush()  # type: ignore[union-attr]
    if status < 0:  # died of a signal: die of it again, with the default action
        signal.signal(-status, signal.SIG_DFL)
        os.kill(os.getpid(), -status)
    os._exit(status)


def _stamp(stage: str) -> None:
    """A line of ``logs/timeline.jsonl`` (the format of noderun/timeline.py), best effort."""
    run_dir = _first(RUN_DIR_VARIABLES)
    if not run_dir:
        return
    who = f"rank{os.environ.get('RANK', '?')}"
    line = f'{{"stage": "{stage}", "t": {time.time()!r}, "who": "{who}"}}\n'
    with contextlib.suppress(OSError):
        fd = os.open(os.path.join(run_dir, "logs", "timeline.jsonl"), _APPEND, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)


_APPEND = os.O_WRONLY | os.O_APPEND | os.O_CREAT


def _watch_group() -> None:
    """Note whether the script forms one process group (``group_watch.py``, loaded by path:
    nothing of noderun's package is imported before the script)."""
    path = os.path.join(os.path.dirname(ENTRY), "group_watch.py")
    spec = importlib.util.spec_from_file_location("_noderun_group_watch", path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    with contextlib.suppress(Exception):  # best effort: never stop the rank
        spec.loader.exec_module(module)
        module.install(_first(RUN_DIR_VARIABLES), os.environ.get("RANK"))


def _whole_line_stdio() -> None:
    """Every line the script prints reaches the file descriptor at once, in one write.

    ``PYTHONUNBUFFERED=1`` (what the launcher sets, so output is not held back) makes ``print``
    write its text and its newline apart; torchrun's tee reads the rank's file between the two
    on a busy machine and glues the next rank's line onto the half line. Line buffering keeps
    output as prompt (at each newline, or an explicit flush) and every line whole."""
    for name in ("stdout", "stderr"):
        with contextlib.suppress(AttributeError, OSError, ValueError):
            stream = getattr(sys, name)
            stream.flush()
            stream.reconfigure(line_buffering=True, write_through=False)


def _serve_store() -> None:
    """srun mode's rank 0: serve torch's store on the socket the node entry handed over, once
    the script imports torch.distributed (``backends/store_host.py``, loaded by path)."""
    if not os.environ.get(STORE_FD_VARIABLE):
        return
    path = os.path.join(os.path.dirname(ENTRY), "backends", "store_host.py")
    spec = importlib.util.spec_from_file_location("_noderun_store_host", path)
    assert spec is not None and spec.loader is not None
    module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.serve_on_import(os.environ, _stamp)


STORE_FD_VARIABLE = "NODERUN__STORE_FD"  # store_host.FD_VARIABLE (a test keeps them equal)


def _die_with_parent() -> None:
    """The rank goes when its agent (or the node entry's starter) goes, even SIGKILLed: loaded by
    path, as this file is, so nothing of the package is imported before the script."""
    path = os.path.join(os.path.dirname(ENTRY), "proc_guard.py")
    spec = importlib.util.spec_from_file_location("_noderun_proc_guard", path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    with contextlib.suppress(OSError):
        spec.loader.exec_module(module)
        module.die_with_parent()
        if module.launcher_gone(os.environ):  # the agent died before we could ask: go too
            os.kill(os.getpid(), signal.SIGKILL)


def main(argv: list[str]) -> NoReturn:
    """Run the rank's program and leave (also called in-process by the node entry in srun mode,
    which set ``os.environ`` for the rank)."""
    _die_with_parent()
    _whole_line_stdio()
    _stamp("rank_started")
    _serve_store()
    _watch_group()
    status = _run(argv)
    _stamp("rank_exited")
    _finish(status)
    raise AssertionError("unreachable")  # _finish leaves the process


if __name__ == "__main__":
    main(sys.argv[1:])
