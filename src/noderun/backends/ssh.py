"""Plain SSH hosts: checks before launch, and closing the shared connections after.

The launch itself is the local supervisor's (``backends/local.py``): every node's agent is
an ``ssh HOST 'cd … && exec env … python ssh_guard.py -- torchrun …'`` process (see
``plan/ssh.py``), so output, failures and teardown work as for simulated nodes. What SSH
adds is checked here first, on every host at once: the host answers (BatchMode: no
password prompt), the working directory and the interpreter exist, torch and noderun are
importable there, and the rendezvous port is free on the master. Each problem is one line
naming the host. After the run, what the ranks wrote into a host's own run directory (no
shared filesystem) is copied back here (``copy_back``).
"""

from __future__ import annotations

import concurrent.futures
import fnmatch
import os
import secrets
import shlex
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Callable, Sequence
from pathlib import Path

from noderun.backends.local import SSH_FAILED, LocalBackend
from noderun.backends.result import Result
from noderun.errors import UsageError
from noderun.plan import LaunchPlan
from noderun.plan.ssh import ssh_argv
from noderun.run_record import RunRecord

# runs on the host as `python -c CHECK GUARD PORT`; prints one line, exit 0 when all is well
CHECK = r"""
import importlib.util, os, socket, sys
guard, port = sys.argv[1], int(sys.argv[2])
missing = [m for m in ("torch", "noderun") if importlib.util.find_spec(m) is None]
if missing:
    print("NODERUN_CHECK missing " + ",".join(missing)); sys.exit(3)
if not os.path.isfile(guard):
    print("NODERUN_CHECK noguard"); sys.exit(3)
if port >= 0:
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind(("", port))
    except OSError:
        print("NODERUN_CHECK port-taken"); sys.exit(3)
    print("NODERUN_CHECK ok %d" % s.getsockname()[1]); s.close()
else:
    print("NODERUN_CHECK ok")
"""


def _check_one(
    host: str, cwd: str, python: str, guard: str, port: int, config: str | None
) -> tuple[str, str, int]:
    script = " ".join(
        [
            f"cd {shlex.quote(cwd)} 2>/dev/null || {{ echo NODERUN_CHECK nodir; exit 3; }};",
            f"test -x {shlex.quote(python)} || {{ echo NODERUN_CHECK nopython; exit 3; }};",
            shlex.join([python, "-c", CHECK, guard, str(port)]),
        ]
    )
    try:
        done = subprocess.run(
            ssh_argv(host, script, config=config),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=60,
        )
    except subprocess.TimeoutExpired:
        return host, "timeout", 124
    marks = [line for line in done.stdout.splitlines() if line.startswith("NODERUN_CHECK ")]
    said = marks[-1].removeprefix("NODERUN_CHECK ") if marks else ""
    if done.returncode == SSH_FAILED or not marks:
        errors = [line for line in done.stderr.splitlines() if line.strip()]
        return host, "ssh: " + (errors[-1] if errors else f"exit code {done.returncode}"), 255
    return host, said, done.returncode


def preflight(
    hosts: Sequence[str],
    cwd: str,
    python: str,
    guard: str,
    master_port: int | None,
    config: str | None = None,
) -> int:
    """Check every host at once; return the rendezvous port (free on ``hosts[0]``)."""
    ports = {host: (master_port or 0) if i == 0 else -1 for i, host in enumerate(hosts)}
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(len(hosts), 32)) as pool:
        results = list(
            pool.map(lambda h: _check_one(h, cwd, python, guard, ports[h], config), hosts)
        )
    port = 0
    for host, said, code in results:
        if code == 0:
            if host == hosts[0]:
                port = int(said.split()[1])
            continue
        raise _refusal(host, said, cwd, python, master_port)
    return port


def _refusal(host: str, said: str, cwd: str, python: str, master_port: int | None) -> UsageError:
    if said.startswith("ssh: "):
        detail = said.removeprefix("ssh: ")
        return UsageError(
            f"host {host}: ssh failed: {detail}",
            "check the host name and that `ssh -o BatchMode=yes HOST true` works without a "
            "password (key in ~/.ssh/authorized_keys, or pass --ssh-config FILE)",
        )
    if said == "timeout":
        return UsageError(f"host {host}: no answer over ssh within 60 s", "is the host up?")
    if said == "nodir":
        return UsageError(
            f"host {host} has no directory {cwd}",
            "run from a directory that exists on every host (a shared filesystem, or the same "
            "checkout at the same path)",
        )
    if said == "nopython":
        return UsageError(
            f"host {host} has no interpreter {python}",
            "install the same Python environment at the same path on every host",
        )
    if said.startswith("missing "):
        return UsageError(
            f"host {host}: {python} cannot import {said.removeprefix('missing ')}",
            "install the same environment (torch, noderun) at the same path on every host",
        )
    if said == "noguard":
        return UsageError(
            f"host {host}: noderun there is not the same installation as here",
            "install noderun at the same path on every host",
        )
    if said == "port-taken":
        return UsageError(
            f"port {master_port} is taken on the master host {host}",
            "pick another --master-port, or leave it out to get a free one",
        )
    return UsageError(f"host {host}: check failed ({said or 'no answer'})", "see ssh's output")


def close_connections(hosts: Sequence[str], config: str | None = None) -> None:
    """End the shared (ControlMaster) connection to every host, best effort."""
    for host in hosts:
        argv = ssh_argv(host, "true", config=config)
        subprocess.run(
            [*argv[:-2], "-O", "exit", host],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            check=False,
            timeout=10,
        )


# runs on a host as `python -c COPY_BACK RUN_DIR TOKEN`: exit 3 when the host sees this run
# directory (the token file written here is there), 4 when it has none; else a tar on stdout
# of what the ranks wrote there: all but older checkpoints (the newest complete one comes;
# tags sort by name and `.complete` marks a finished one, as in runtime/checkpoint.py)
COPY_BACK = r"""
import os, sys, tarfile
run_dir, token = sys.argv[1], sys.argv[2]
try:
    with open(os.path.join(run_dir, ".noderun-copy-back")) as f:
        if f.read() == token:
            sys.exit(3)
except OSError:
    pass
if not os.path.isdir(run_dir):
    sys.exit(4)
ckpt = os.path.join(run_dir, "checkpoints")
done = sorted(d for d in (os.listdir(ckpt) if os.path.isdir(ckpt) else [])
              if not d.startswith(".") and os.path.isfile(os.path.join(ckpt, d, ".complete")))
def wanted(info):
    parts = info.name.split("/")
    if len(parts) > 2 and parts[1] == "checkpoints" and parts[2] not in done[-1:]:
        return None
    return info
with tarfile.open(fileobj=sys.stdout.buffer, mode="w|") as tar:
    tar.add(run_dir, arcname=".", filter=wanted)
"""
COPY_TOKEN = ".noderun-copy-back"
# written here by noderun itself (run.json, the lock, the streamed rank and agent logs): kept
OWN = (
    "run.json",
    ".noderun.lock",
    "logs/rank*.log",
    "logs/rank*.log.times",
    "logs/node*.agent.log",
    COPY_TOKEN,
)
MERGED = "logs/timeline.jsonl"  # every process appends to it: the hosts' new lines are added


def copy_back(plan: LaunchPlan, config: str | None = None) -> dict[str, str]:
    """Bring what the ranks wrote into each host's run directory here, unless the host sees
    this very directory (a shared filesystem): the host's files replace older copies, those
    noderun wrote here (``OWN``) are kept. ``{host: what happened}``, ``{}`` without hosts."""
    hosts = [node.host for node in plan.nodes if node.remote]
    if not hosts:
        return {}
    token = secrets.token_hex(16)
    marker = plan.run_dir / COPY_TOKEN
    marker.write_text(token)
    python = sys.executable
    remote = shlex.join([python, "-c", COPY_BACK, str(plan.run_dir), token])
    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=min(len(hosts), 32)) as pool:
            said = list(pool.map(lambda h: _copy_from(h, remote, plan.run_dir, config), hosts))
    finally:
        marker.unlink(missing_ok=True)
    copied = [host for host, what in zip(hosts, said, strict=True) if what != "shared"]
    if copied:  # say which: the README promises it, run.json's remote_files keeps it
        print(
            f"noderun: {', '.join(copied)} do not share {plan.run_dir}: what the ranks wrote "
            "there was copied back here (run.json remote_files)",
            flush=True,
        )
    return dict(zip(hosts, said, strict=True))


def _copy_from(host: str, remote: str, run_dir: Path, config: str | None) -> str:
    proc = subprocess.Popen(
        ssh_argv(host, remote, config=config),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    copied = 0
    try:
        with tarfile.open(fileobj=proc.stdout, mode="r|") as tar:
            for member in tar:
                copied += merge_file(tar, member, run_dir)
    except tarfile.ReadError:
        pass  # no tar came: the exit code says why
    code = proc.wait()
    error = proc.stderr.read().decode(errors="replace").strip().splitlines()
    if code == 3:
        return "shared"
    if code == 4:
        return "no run directory there"
    if code != 0:
        return f"not copied: {error[-1] if error else f'exit code {code}'}"
    return f"copied back ({copied} files)"


def merge_file(tar: tarfile.TarFile, member: tarfile.TarInfo, run_dir: Path) -> int:
    """One file of a host's run directory into ``run_dir``; 1 when something was written."""
    name = os.path.normpath(member.name)
    if not member.isfile() or name.startswith(("..", "/")):
        return 0
    if any(fnmatch.fnmatchcase(name, pattern) for pattern in OWN):
        return 0
    source = tar.extractfile(member)
    if source is None:
        return 0
    target = run_dir / name
    target.parent.mkdir(parents=True, exist_ok=True)
    if name == MERGED:  # lines of earlier attempts were added before: only new ones
        known = set(target.read_bytes().splitlines()) if target.exists() else set()
        new = [line for line in source.read().splitlines() if line and line not in known]
        with open(target, "ab") as sink:
            sink.write(b"".join(line + b"\n" for line in new))
        return 1 if new else 0
    with source, open(target, "wb") as sink:
        shutil.copyfileobj(source, sink)
    return 1


class SshBackend(LocalBackend):
    """One node per SSH host: their agents run and stop as one gang from here, and what the
    ranks wrote on a host without this run directory is copied back after each attempt."""

    def __init__(
        self,
        plan: LaunchPlan,
        command: list[str],
        config: str | None = None,
        show: Callable[[int], bool] | None = None,
    ) -> None:
        super().__init__(plan, command, show)
        self.config = config

    def record(self, record: RunRecord, result: Result) -> None:
        if copied := copy_back(self.plan, self.config):
            record.remote_files = copied
        super().record(record, result)
