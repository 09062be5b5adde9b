"""Plain SSH hosts: checks before launch, and closing the shared connections after.

The launch itself is the local supervisor's (``backends/local.py``): every node's agent is
an ``ssh HOST 'cd … && exec env … python ssh_guard.py -- torchrun …'`` process (see
``plan/ssh.py``), so output, failures and teardown work as for simulated nodes. What SSH
adds is checked here first, on every host at once: the host answers (BatchMode: no
password prompt), the working directory and the interpreter exist, torch and noderun are
importable there, and the rendezvous port is free on the master. Each problem is one line
naming the host.
"""

from __future__ import annotations

import concurrent.futures
import shlex
import subprocess
from collections.abc import Sequence

from noderun.backends.local import SSH_FAILED
from noderun.errors import UsageError
from noderun.plan.ssh import ssh_argv

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
