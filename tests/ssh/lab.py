"""A real SSH "cluster" on this machine: one Debian sshd per host, for the SSH tests.

Each host is ``sshhostN`` at 127.0.20.N (all of 127.0.0.0/8 is loopback), its own sshd on
port 2222 started in its own UTS and mount namespaces (``unshare --uts --mount``), so
commands there see the hostname ``sshhostN``, as the Slurm lab does for its nodes. The hosts
share this machine's filesystem but for two things: ``PRIVATE`` shows each host its own
folder (``ROOT/sshhostN``, a bind mount: write there what only that host should see, or a
different file at the same path on each host), and the paths in ``hidden`` are covered by an
empty tmpfs on their host (a host without the venv, or without the working directory).
Keys are generated at start: a host key per sshd and one client key; ``ssh_config`` holds
what a user's ~/.ssh/config would (user, key, known hosts) and is what the tests give
``--ssh-config``. Names go into /etc/hosts between marker lines, removed at the end.
``sshdown`` (127.0.20.9) has no sshd.
"""

from __future__ import annotations

import fcntl
import os
import shlex
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import IO

ROOT = Path("/tmp/noderun-ssh-lab")
PORT = 2222
BEGIN, END = "# noderun-ssh-lab begin", "# noderun-ssh-lab end"
SSHD = "/usr/sbin/sshd"
PRIVATE = ROOT / "private"  # each host sees its own ROOT/<host> here
# one lab at a time on this machine (same addresses, same ROOT): a second session waits
LOCK = Path("/tmp/noderun-ssh-lab.lock")
LOCK_WAIT = 1200.0


def addr(index: int) -> str:
    return f"127.0.20.{index}"


def available() -> str | None:
    """Why the lab cannot start here, or None."""
    for tool in (SSHD, "/usr/bin/ssh", "/usr/bin/ssh-keygen", "/usr/bin/unshare", "/bin/mount"):
        if not os.path.exists(tool):
            return f"{tool} is missing: apt-get install openssh-server (make ssh-lab does)"
    if os.geteuid() != 0:
        return "the SSH lab needs root (sshd, unshare, /etc/hosts)"
    return None


def _keygen(path: Path) -> str:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)],
        check=True,
        capture_output=True,
    )
    return path.with_suffix(".pub").read_text().strip()


def _hosts_block(names: dict[str, str]) -> None:
    text = Path("/etc/hosts").read_text()
    if BEGIN in text:
        head, _, rest = text.partition(BEGIN)
        text = head + rest.partition(END)[2].lstrip("\n")
    if names:
        lines = [f"{ip} {name}" for name, ip in names.items()]
        text = text.rstrip("\n") + "\n" + "\n".join([BEGIN, *lines, END]) + "\n"
    Path("/etc/hosts").write_text(text)


class SshLab:
    def __init__(self, hosts: int = 2, hidden: dict[str, list[str]] | None = None) -> None:
        self.names = [f"sshhost{i}" for i in range(1, hosts + 1)]
        self.hidden = hidden or {}
        self._lock: IO[str] | None = None
        self.procs: list[subprocess.Popen[bytes]] = []
        self.config = ROOT / "ssh_config"
        self.wrong_key_config = ROOT / "ssh_config_wrong_key"

    def _take_lock(self) -> None:
        """Wait for another session's lab (another checkout's tests) to stop first."""
        self._lock = open(LOCK, "w")  # noqa: SIM115 (held until stop())
        deadline = time.monotonic() + LOCK_WAIT
        while True:
            try:
                fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"another SSH lab held {LOCK} {LOCK_WAIT:.0f} s") from None
                time.sleep(1)

    def start(self) -> SshLab:
        self._take_lock()
        shutil.rmtree(ROOT, ignore_errors=True)
        ROOT.mkdir(parents=True)
        Path("/run/sshd").mkdir(parents=True, exist_ok=True)  # sshd's privilege separation
        PRIVATE.mkdir()
        client = _keygen(ROOT / "id_ed25519")
        _keygen(ROOT / "other_key")
        (ROOT / "authorized_keys").write_text(client + "\n")
        known = []
        for i, name in enumerate(self.names, start=1):
            host_pub = _keygen(ROOT / f"{name}_host_key")
            known.append(f"{name},{addr(i)} {host_pub}")
            config = ROOT / f"{name}.sshd_config"
            config.write_text(
                "\n".join(
                    [
                        f"ListenAddress {addr(i)}:{PORT}",
                        f"HostKey {ROOT / f'{name}_host_key'}",
                        f"PidFile {ROOT / f'{name}.pid'}",
                        f"AuthorizedKeysFile {ROOT / 'authorized_keys'}",
                        "PermitRootLogin prohibit-password",
                        "PasswordAuthentication no",
                        "KbdInteractiveAuthentication no",
                        "UsePAM no",
                        "StrictModes no",
                        "MaxSessions 64",
                        "MaxStartups 64",
                        "LogLevel ERROR",
                        "",
                    ]
                )
            )
            self.private(name).mkdir()
            # mounts made in the host's own mount namespace stay there (private propagation)
            mounts = [f"mount --bind {self.private(name)} {PRIVATE}"] + [
                f"mount -t tmpfs -o size=1m,mode=755 none {shlex.quote(path)}"
                for path in self.hidden.get(name, [])
            ]
            self.procs.append(
                subprocess.Popen(
                    [
                        "unshare",
                        "--uts",
                        "--mount",
                        "--propagation",
                        "private",
                        "sh",
                        "-c",
                        " && ".join(
                            [*mounts, f"hostname {name}", f"exec {SSHD} -D -e -f {config}"]
                        ),
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=open(ROOT / f"{name}.log", "wb"),  # noqa: SIM115
                )
            )
        (ROOT / "known_hosts").write_text("\n".join(known) + "\n")
        for path, key in ((self.config, "id_ed25519"), (self.wrong_key_config, "other_key")):
            path.write_text(
                "\n".join(
                    [
                        "Host sshhost* sshdown",
                        "  User root",
                        f"  Port {PORT}",
                        f"  IdentityFile {ROOT / key}",
                        "  IdentitiesOnly yes",
                        f"  UserKnownHostsFile {ROOT / 'known_hosts'}",
                        "  StrictHostKeyChecking yes",
                        "  LogLevel ERROR",
                        "",
                    ]
                )
            )
        _hosts_block({**{n: addr(i) for i, n in enumerate(self.names, 1)}, "sshdown": addr(9)})
        self._wait_listening()
        return self

    def private(self, name: str) -> Path:
        """What ``name`` sees at ``PRIVATE`` (writable from here)."""
        return ROOT / name

    def _wait_listening(self, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        for i, name in enumerate(self.names, start=1):
            while True:
                try:
                    socket.create_connection((addr(i), PORT), timeout=1).close()
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        log = (ROOT / f"{name}.log").read_text(errors="replace")
                        raise RuntimeError(f"sshd of {name} never listened: {log}") from None
                    time.sleep(0.1)

    def stop(self) -> None:
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
        _hosts_block({})
        subprocess.run(["pkill", "-f", "ssh: /tmp/noderun-ssh-"], check=False)  # mux masters
        if self._lock is not None:
            self._lock.close()  # releases the flock
            self._lock = None
