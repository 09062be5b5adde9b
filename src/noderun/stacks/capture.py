"""Take the stacks of the ranks running on this machine: py-spy, else faulthandler.

Ranks are found by their environment: every rank noderun starts carries ``NODERUN__RUN_DIR``
and ``RANK`` (and ``SLURM_JOB_ID``/``SLURMD_NODENAME`` inside SLURM), so a plain script is
found as well as one that calls ``noderun.init()``. ``py-spy dump`` needs ptrace rights on the
rank (same user without a Yama restriction, or root / CAP_SYS_PTRACE); when it is missing or
refused, ranks that called ``noderun.init()`` dump their stacks themselves on SIGUSR2
(``faulthandler``, see ``noderun.runtime.heartbeat``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

import psutil

from noderun.stacks.analysis import rank_list
from noderun.stacks.files import stack_file
from noderun.stacks.model import Frame, RankStack, frames_from_faulthandler, frames_from_py_spy
from noderun.topology.contract import RankContract

PY_SPY_TIMEOUT = 20.0
FAULTHANDLER_TIMEOUT = 3.0
PY_SPY_HINT = "pip install 'noderun[stacks]' (py-spy) and put it on PATH"
RIGHTS_HINT = "py-spy needs ptrace rights: the ranks' user without a Yama restriction, or root"


@dataclasses.dataclass(frozen=True)
class RankProcess:
    """A live rank: its process, where it runs and which run it belongs to."""

    rank: int
    pid: int
    host: str
    run_dir: str


def _environ(proc: psutil.Process) -> dict[str, str] | None:
    try:
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
        env: dict[str, str] = proc.environ()
    except (psutil.Error, OSError):
        return None
    return env


def find_ranks(
    run_dir: Path | None = None,
    job_id: str | None = None,
    node: str | None = None,
    roots: Sequence[int] | None = None,
) -> list[RankProcess]:
    """Live ranks of a run (by run directory) or a SLURM job, on ``node`` when given.

    ``roots`` limits the search to those processes' descendants (a supervisor's own gang).
    A rank's own children (DataLoader workers) share its variables: the topmost process wins.
    """
    want_dir = os.path.realpath(run_dir) if run_dir else None
    if roots is not None:
        candidates: Iterable[psutil.Process] = _descendants(roots)
    else:
        candidates = psutil.process_iter()
    found: dict[int, RankProcess] = {}
    parents: dict[int, int] = {}
    for proc in candidates:
        env = _environ(proc)
        contract = RankContract.from_env(env or {})
        if not env or not env.get("RANK", "").isdigit() or not contract.run_dir:
            continue
        if want_dir and os.path.realpath(contract.run_dir) != want_dir:
            continue
        if job_id and env.get("SLURM_JOB_ID") != job_id:
            continue
        if node and env.get("SLURMD_NODENAME", node) != node:
            continue
        host = env.get("SLURMD_NODENAME") or f"localhost/{contract.node_rank or 0}"
        try:
            parents[proc.pid] = proc.ppid()
        except psutil.Error:
            continue
        found[proc.pid] = RankProcess(int(env["RANK"]), proc.pid, host, contract.run_dir)
    tops = [
        rp
        for pid, rp in found.items()
        if parents[pid] not in found or found[parents[pid]].rank != rp.rank
    ]
    return sorted(tops, key=lambda rp: rp.rank)


def _descendants(roots: Sequence[int]) -> list[psutil.Process]:
    out = []
    for pid in roots:
        try:
            out += psutil.Process(pid).children(recursive=True)
        except psutil.Error:
            continue
    return out


def py_spy_path() -> str | None:
    """py-spy on PATH, else beside the ``noderun`` command being run (its environment's bin)."""
    found = shutil.which("py-spy")
    if found:
        return found
    if Path(sys.argv[0]).name == "noderun":
        beside = Path(sys.argv[0]).resolve().parent / "py-spy"
        if beside.is_file() and os.access(beside, os.X_OK):
            return str(beside)
    return None


def py_spy_error(text: str) -> str:
    """py-spy's reason in one line: ``Error: X`` and its innermost cause, not its backtrace."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    error = next((line.removeprefix("Error: ") for line in lines if line.startswith("Error:")), "")
    causes: list[str] = []
    if "Caused by:" in lines:
        for line in lines[lines.index("Caused by:") + 1 :]:
            if line.startswith("Stack backtrace"):
                break
            causes.append(line.split(": ", 1)[-1] if line[:1].isdigit() else line)
    parts = [part for part in (error, causes[-1] if causes else "") if part]
    return ": ".join(parts) or (lines[0] if lines else "no message")


def py_spy_stacks(
    py_spy: str, ranks: Sequence[RankProcess]
) -> dict[int, tuple[tuple[Frame, ...], str | None]]:
    """``py-spy dump --json`` of every rank at once: rank -> (frames, error or None)."""
    procs = {
        rp.rank: subprocess.Popen(
            [py_spy, "dump", "--pid", str(rp.pid), "--json"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
        )
        for rp in ranks
    }
    out: dict[int, tuple[tuple[Frame, ...], str | None]] = {}
    for rank, proc in procs.items():
        try:
            stdout, stderr = proc.communicate(timeout=PY_SPY_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            out[rank] = ((), f"py-spy took over {PY_SPY_TIMEOUT:g} s")
            continue
        if proc.returncode != 0:
            out[rank] = ((), py_spy_error(stderr or stdout))
            continue
        try:
            out[rank] = (frames_from_py_spy(json.loads(stdout)), None)
        except (ValueError, TypeError, KeyError) as err:
            out[rank] = ((), f"unreadable py-spy output: {err}")
    return out


def _catches(pid: int, signum: int) -> bool:
    """True if ``pid`` has a handler for ``signum`` (SigCgt in /proc/PID/status)."""
    try:
        with open(f"/proc/{pid}/status") as handle:
            mask = next(int(line.split()[1], 16) for line in handle if line.startswith("SigCgt:"))
    except (OSError, StopIteration, ValueError):
        return False
    return bool(mask >> (signum - 1) & 1)


def _fallback_signal(rp: RankProcess) -> int | None:
    """The signal the rank's faulthandler answers, if this very process registered one."""
    try:
        with open(stack_file(rp.run_dir, rp.rank)) as handle:
            header = handle.readline()
    except OSError:
        return None
    fields = dict(part.split("=", 1) for part in header.split() if "=" in part)
    if fields.get("pid") != str(rp.pid) or not fields.get("signal", "").isdigit():
        return None
    signum = int(fields["signal"])
    return signum if _catches(rp.pid, signum) else None


def faulthandler_stacks(
    ranks: Sequence[RankProcess], timeout: float = FAULTHANDLER_TIMEOUT
) -> dict[int, tuple[tuple[Frame, ...], str | None]]:
    """Signal every rank that registered faulthandler, then read what each appended."""
    out: dict[int, tuple[tuple[Frame, ...], str | None]] = {}
    pending: dict[int, tuple[Path, int]] = {}
    for rp in ranks:
        signum = _fallback_signal(rp)
        if signum is None:
            out[rp.rank] = ((), "no faulthandler fallback: the script does not call noderun.init()")
            continue
        path = stack_file(rp.run_dir, rp.rank)
        pending[rp.rank] = (path, path.stat().st_size)
        try:
            os.kill(rp.pid, signum)
        except OSError as err:
            out[rp.rank] = ((), f"cannot signal pid {rp.pid}: {err.strerror}")
            del pending[rp.rank]
    deadline = time.monotonic() + timeout
    sizes = {rank: -1 for rank in pending}
    while pending and time.monotonic() < deadline:
        time.sleep(0.02)
        for rank, (path, before) in list(pending.items()):
            size = path.stat().st_size
            if size > before and size == sizes[rank]:  # grown, and done growing
                with open(path) as handle:
                    handle.seek(before)
                    out[rank] = (frames_from_faulthandler(handle.read()), None)
                del pending[rank]
            sizes[rank] = size
    for rank in pending:
        out[rank] = ((), f"no faulthandler dump within {timeout:g} s")
    return out


def take(
    ranks: Sequence[RankProcess], py_spy: str | None = None
) -> tuple[list[RankStack], list[str]]:
    """Every rank's stack (py-spy first, faulthandler for the rest) and one note per problem."""
    notes: list[str] = []
    results: dict[int, tuple[tuple[Frame, ...], str | None]] = {}
    source = dict.fromkeys((rp.rank for rp in ranks), "py-spy")
    if py_spy:
        results = py_spy_stacks(py_spy, ranks)
        refused = {r: e for r, (f, e) in results.items() if not f}
        if refused:
            error = next(iter(refused.values()))
            denied = any(w in str(error) for w in ("ermission", "not permitted", "EPERM"))
            notes.append(
                f"py-spy could not read {rank_list(sorted(refused))} ({error}); "
                + (f"{RIGHTS_HINT}; " if denied else "")
                + "trying faulthandler"
            )
    else:
        notes.append(f"py-spy not found on PATH ({PY_SPY_HINT}); using faulthandler")
    rest = [rp for rp in ranks if not results.get(rp.rank, ((), None))[0]]
    if rest:
        results.update(faulthandler_stacks(rest))
        source.update(dict.fromkeys((rp.rank for rp in rest), "faulthandler"))
    stacks = [
        RankStack(
            rank=rp.rank,
            host=rp.host,
            pid=rp.pid,
            frames=results[rp.rank][0],
            source=source[rp.rank] if results[rp.rank][0] else "",
            error=_stopped(rp.pid) or results[rp.rank][1],
        )
        for rp in ranks
    ]
    return stacks, notes


def _stopped(pid: int) -> str | None:
    """ "stopped by a signal (SIGSTOP or SIGTSTP): alive, silent" for a stopped process."""
    try:
        status = psutil.Process(pid).status()
    except psutil.Error:
        return None
    if status in (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP):
        return f"pid {pid} stopped by a signal (SIGSTOP or SIGTSTP): alive, silent"
    return None
