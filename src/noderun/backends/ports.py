"""Ports on this machine: a free one for a local run, and a refusal naming a taken one."""

from __future__ import annotations

import socket

from noderun.errors import UsageError


def free_port(host: str = "127.0.0.1") -> int:
    """A port the kernel reports free on ``host`` right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_in_use(port: int, host: str = "") -> bool:
    """True when something already listens on ``port`` (binding it fails)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


def require_free_port(port: int, host: str = "") -> int:
    """Return ``port`` or raise a UsageError naming it and the fix."""
    if not 1 <= port <= 65535:
        raise UsageError(f"port {port} is out of range", "use a port between 1024 and 65535")
    if port_in_use(port, host):
        raise UsageError(
            f"port {port} is already in use",
            "pick another with --master-port (or leave it out to get a free one)",
        )
    return port
