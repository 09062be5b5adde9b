"""One node's preflight facts, printed as one JSON line: ``python -m noderun.doctor.probe``.

Every node runs it at once (srun, one task per node). The master node's probe also listens
on the job's port: that proves the port is free there, and every probe (the master's too)
connects to it, which proves the master is reachable and measures the clock offset.
"""

from __future__ import annotations

import argparse
import contextlib
import hmac
import importlib.util
import json
import os
import platform
import re
import shutil
import socket
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import psutil

from noderun.doctor.fingerprint import code_facts, path_facts
from noderun.first_lines import FirstLines, peer
from noderun.srun_lines import write_marked
from noderun.topology.contract import RankContract

MARKER = "NODERUN_DOCTOR_PROBE "
SECRET_WORDS = ("TOKEN", "KEY", "SECRET", "PASSWORD")
ENV_PREFIXES = ("NCCL_", "GLOO_", "CUDA_", "MASTER_", "TORCH_", "NODERUN_", "SLURM_JOB_ID")
LEFTOVER_MARKERS = (
    "torch.distributed.run",
    "torchrun",
    "noderun.node",
    "torch/distributed/elastic",
)
SHM_PREFIXES = ("torch_", "nccl", "__KMP_REGISTERED_LIB")


def is_secret(name: str) -> bool:
    return any(word in name.upper() for word in SECRET_WORDS)


def visible_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables that matter for a multi-node run; secrets are never included."""
    return {
        k: v for k, v in sorted(environ.items()) if k.startswith(ENV_PREFIXES) and not is_secret(k)
    }


def versions() -> dict[str, Any]:
    """Python, torch, its CUDA and NCCL, GPUs: read from the installed files, without importing
    torch (an import costs seconds of CPU on every node; the probe should take well under one)."""
    torch_version = cuda = nccl = None
    with contextlib.suppress(metadata.PackageNotFoundError):
        torch_version = metadata.version("torch")
    spec = importlib.util.find_spec("torch")
    if spec is not None and spec.origin:
        with contextlib.suppress(OSError):
            text = (Path(spec.origin).parent / "version.py").read_text()
            found = re.search(r"^cuda\b[^=]*=\s*'([^']+)'", text, re.M)
            cuda = found.group(1) if found else None
    for dist in metadata.distributions():
        name = (dist.metadata["Name"] or "").lower()
        if name.startswith("nvidia-nccl"):
            nccl = dist.version
    devices = sorted(Path("/dev").glob("nvidia[0-9]*")) if cuda else []
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    count = len(devices)
    if visible is not None and devices:
        count = min(count, len([v for v in visible.split(",") if v.strip()]))
    return {
        "python": platform.python_version(),
        "torch": torch_version,
        "cuda": cuda,
        "nccl": nccl,
        "device_count": count,
    }


def resolve(host: str) -> dict[str, Any]:
    """Forward (name -> addresses) and reverse (first address -> name) resolution."""
    out: dict[str, Any] = {"host": host, "addresses": [], "reverse": None, "error": None}
    try:
        infos = socket.getaddrinfo(host, None, socket.AF_INET, socket.SOCK_STREAM)
        out["addresses"] = sorted({str(info[4][0]) for info in infos})
        out["reverse"] = socket.gethostbyaddr(out["addresses"][0])[0]
    except OSError as err:
        out["error"] = f"{type(err).__name__}: {err}"
    return out


def route_interface(address: str, port: int) -> dict[str, Any]:
    """The local interface the kernel routes ``address`` through (UDP connect sends nothing)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.connect((address, port))
            local = sock.getsockname()[0]
    except OSError as err:
        return {"interface": None, "local_address": None, "error": str(err)}
    for name, addrs in psutil.net_if_addrs().items():
        if any(a.family == socket.AF_INET and a.address == local for a in addrs):
            return {"interface": name, "local_address": local, "error": None}
    # 127.0.0.0/8 beyond 127.0.0.1 belongs to lo without being listed on it
    name = "lo" if local.startswith("127.") else None
    return {"interface": name, "local_address": local, "error": None}


def _is_launcher(proc: psutil.Process) -> bool:
    try:
        cmd = " ".join(proc.cmdline())
    except psutil.Error:
        return False
    return any(marker in cmd for marker in LEFTOVER_MARKERS)


def _orphaned(proc: psutil.Process) -> bool:
    """Whether the launcher process ``proc`` outlived what started it: going up through its
    launcher ancestors (torchrun's agent above its ranks, the node entry above the agent) ends
    at init, or at no parent. A live job's launchers hang from something alive that is not a
    launcher: ``noderun run``, slurmstepd, a shell."""
    try:
        for parent in proc.parents():
            if parent.pid <= 1:
                return True
            if not _is_launcher(parent):
                return False
        return bool(proc.ppid() <= 1)
    except psutil.Error:
        return False


def leftovers() -> dict[str, Any]:
    """Launcher processes of earlier runs (orphaned; never a live job's), stale /dev/shm
    segments, torchelastic temp dirs."""
    mine = {os.getpid(), *(p.pid for p in psutil.Process().parents())}
    procs = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmd = " ".join(proc.info["cmdline"] or [])
        if proc.info["pid"] in mine or not any(m in cmd for m in LEFTOVER_MARKERS):
            continue
        if _orphaned(proc):
            procs.append(f"{proc.info['pid']}: {cmd[:80]}")
    shm = Path("/dev/shm")
    stale = (
        [p.name for p in shm.iterdir() if p.name.startswith(SHM_PREFIXES)] if shm.is_dir() else []
    )
    elastic = [str(p) for p in Path(os.environ.get("TMPDIR", "/tmp")).glob("torchelastic_*")]
    return {"processes": procs[:10], "shm": stale[:10], "torchelastic_dirs": elastic[:10]}


RETRY_SEC = 0.02  # the master's probe is usually listening within a few tens of ms


def _spare_port() -> int:
    with socket.socket() as sock:
        sock.bind(("", 0))
        return int(sock.getsockname()[1])


HELLO_LIMIT = 256  # bytes of a probe's hello line (the token and a little more)
HELLO_TIMEOUT = 5.0  # a probe says hello at once: a connection silent this long is not one
DENIED = "DENIED not this job's token"


class _Listener:
    """The master probe's port: answers each probe of this job (its hello line brings the job's
    token, when the job has one) with this host's clock, until ``expected`` came or time is up.
    A stranger (another job, a port scanner, garbage, an endless line, a connection that says
    nothing) is dropped, counted and logged once per peer address and reason; connections are
    read side by side, so a silent one never holds the probes behind it."""

    def __init__(
        self,
        listener: socket.socket,
        expected: int,
        token: str,
        log: Callable[[str], object] = lambda line: print(line, file=sys.stderr, flush=True),
    ) -> None:
        self.listener = listener
        self.expected = expected
        self.token = token
        self.log = log
        self.seen: list[str] = []  # the probes answered (their addresses)
        self.dropped: Counter[tuple[str, str]] = Counter()  # strangers: (address, why) -> count

    def serve(self, deadline: float) -> None:
        hellos = FirstLines(self.listener, HELLO_LIMIT, HELLO_TIMEOUT)
        try:
            while len(self.seen) < self.expected:
                got = hellos.next(deadline)
                if got is None:
                    return
                conn, line, why = got
                if line is None:
                    self._drop(conn, why)
                else:
                    self._judge(conn, line)
        finally:
            hellos.close()

    def _judge(self, conn: socket.socket, line: bytes) -> None:
        words = line.decode(errors="replace").split()
        if len(words) != 2 or words[0] != "HELLO":
            self._drop(conn, "not a doctor probe")
        elif self.token and not hmac.compare_digest(words[1].encode(), self.token.encode()):
            with contextlib.suppress(OSError):
                conn.sendall(DENIED.encode() + b"\n")  # says nothing of the token itself
            self._drop(conn, "not this job's token")
        else:
            self.seen.append(peer(conn, port=False))
            with conn, contextlib.suppress(OSError):
                conn.sendall(json.dumps({"time": time.time()}).encode() + b"\n")

    def _drop(self, conn: socket.socket, why: str) -> None:
        address = peer(conn, port=False)
        conn.close()
        self.dropped[address, why] += 1
        if self.dropped[address, why] == 1:  # a stranger that retries is said once
            self.log(
                f"noderun doctor: dropped a connection from {address} at the master's port: {why}"
            )


def contact_master(address: str, port: int, deadline: float, token: str = "") -> dict[str, Any]:
    """Connect (retrying until ``deadline``), say hello with the job's ``token``, read the
    master's clock: offset like NTP.

    A connection that is accepted but never answered is another program holding the port
    (the master's probe could not listen on it): said at once, not retried until the deadline."""
    error = "no attempt"
    while time.monotonic() < deadline:
        sent = time.time()
        connected = False
        try:
            with socket.create_connection((address, port), timeout=2) as sock:
                connected = True
                sock.sendall(f"HELLO {token or '-'}\n".encode())
                reply = sock.makefile().readline()
            received = time.time()
            if reply.strip() == DENIED:
                said = f"the doctor at port {port} turned this probe away: {DENIED[7:]}"
                why = "another job's doctor, or this node's NODERUN_JOB_TOKEN is not the master's"
                return {**_no_answer(f"{said} ({why})"), "foreign": True, "denied": True}
            master_time = float(json.loads(reply)["time"])
            return {
                "reachable": True,
                "clock_offset_sec": master_time - (sent + received) / 2,
                "round_trip_ms": (received - sent) * 1000,
                "error": None,
            }
        except (OSError, ValueError, KeyError) as err:
            error = f"{type(err).__name__}: {err}"
            if connected:
                said = f"port {port} accepted the connection but did not answer as the doctor"
                return {
                    **_no_answer(f"{said} ({error}): another program holds it"),
                    "foreign": True,
                }
            time.sleep(RETRY_SEC)
    return _no_answer(error)


def _no_answer(error: str) -> dict[str, Any]:
    return {"reachable": False, "clock_offset_sec": None, "round_trip_ms": None, "error": error}


def run_probe(
    master: str,
    port: int,
    nnodes: int,
    token_file: Path | None,
    token: str,
    wait: float,
    script: str | None = None,
    paths: Sequence[str] = (),
    is_master: bool | None = None,
    job_token: str | None = None,
) -> dict[str, Any]:
    """This node's facts; ``token_file`` None: no shared run directory to check (nodes
    started by hand), ``is_master`` None: this is the master if its hostname is ``master``;
    ``job_token`` (default: the rank contract's, ``NODERUN__JOB_TOKEN``) is what the master's
    port asks of every probe ('' on every node: nothing asked)."""
    if job_token is None:
        job_token = RankContract.from_env(os.environ).job_token or ""
    host = socket.gethostname()
    if is_master is None:
        is_master = host == master or host.split(".")[0] == master.split(".")[0]
    deadline = time.monotonic() + wait
    facts: dict[str, Any] = {"host": host, "is_master": is_master, **versions()}
    facts["tasks_per_node"] = os.environ.get("NODERUN_DOCTOR_TASKS_PER_NODE")
    facts["cuda_visible_devices"] = os.environ.get("CUDA_VISIBLE_DEVICES")
    facts["env"] = visible_env(os.environ)
    facts["master"] = resolve(master)
    server = None
    if is_master:
        listener = socket.socket()
        try:
            listener.bind(("", port))
            listener.listen(64)
            # a second free port, for the collective test that follows this probe
            facts["port"] = {"port": port, "free": True, "error": None, "spare": _spare_port()}
            server = _Listener(listener, nnodes, job_token)
            serving = threading.Thread(target=server.serve, args=(deadline,))
            serving.start()
        except OSError as err:
            listener.close()
            # the collective still needs a port: a free one, not port+1 (the next job's port)
            facts["port"] = {"port": port, "free": False, "error": str(err), "spare": _spare_port()}
    address = (facts["master"]["addresses"] or [master])[0]
    facts["contact"] = contact_master(address, port, deadline, job_token)
    facts["route"] = route_interface(address, port)
    facts["interfaces"] = sorted(psutil.net_if_addrs())
    if token_file is None:
        facts["shared_fs"] = {"skipped": "nodes started by hand keep their own run directories"}
    else:
        try:
            facts["shared_fs"] = {"path": str(token_file), "ok": token_file.read_text() == token}
        except OSError as err:
            facts["shared_fs"] = {"path": str(token_file), "ok": False, "error": str(err)}
    here = token_file.parent if token_file is not None and token_file.parent.exists() else "."
    usage = shutil.disk_usage(here)
    facts["disk_free_bytes"] = usage.free
    facts["leftovers"] = leftovers()
    facts["code"] = code_facts(script)
    facts["paths"] = path_facts(paths)
    if server is not None:
        serving.join()
        listener.close()
        facts["port"]["clients"] = len(server.seen)
        facts["port"]["dropped"] = [
            {"from": address, "why": why, "count": count}
            for (address, why), count in server.dropped.most_common(20)
        ]
    facts["time"] = time.time()
    return facts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m noderun.doctor.probe")
    parser.add_argument("--master", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--nnodes", type=int, default=1)
    parser.add_argument("--token-file", type=Path, required=True)
    parser.add_argument("--token", required=True, help="what --token-file holds (no secret)")
    parser.add_argument("--wait", type=float, default=20.0)
    parser.add_argument("--script", help="hash this file (the training script)")
    parser.add_argument("--check-path", action="append", default=[], dest="paths")
    args = parser.parse_args(argv)
    facts = run_probe(
        args.master,
        args.port,
        args.nnodes,
        args.token_file,
        args.token,
        args.wait,
        script=args.script,
        paths=args.paths,
    )
    write_marked(MARKER, json.dumps(facts, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
