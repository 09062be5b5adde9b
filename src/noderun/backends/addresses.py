"""Which machine a name or an address is: resolved and compared as addresses, IPv4 and IPv6.

``node1``, ``node1.cluster``, ``10.0.0.1`` and ``hostname --ip-address``'s answer all name the
same node; a launcher that compared them as text refused node 0 given by address.
"""

from __future__ import annotations

import functools
import ipaddress
import socket

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def _parse(text: str) -> Address | None:
    try:
        found = ipaddress.ip_address(text.split("%", 1)[0])  # fe80::1%eth0: scope dropped
    except ValueError:
        return None
    if isinstance(found, ipaddress.IPv6Address) and found.ipv4_mapped is not None:
        return found.ipv4_mapped  # ::ffff:10.0.0.1 is 10.0.0.1
    return found


def addresses(name: str) -> frozenset[Address]:
    """Every address ``name`` resolves to (an address is itself); empty when it does not."""
    literal = _parse(name.strip("[]"))
    if literal is not None:
        return frozenset({literal})
    try:
        infos = socket.getaddrinfo(name, None, socket.AF_UNSPEC, socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return frozenset()
    return frozenset(a for a in (_parse(str(info[4][0])) for info in infos) if a is not None)


@functools.cache
def this_machine() -> frozenset[Address]:
    """This machine's addresses: its interfaces' and what its own name resolves to."""
    import psutil  # only asked when a name did not match as text

    found = {_parse(a.address) for nic in psutil.net_if_addrs().values() for a in nic}
    return frozenset(a for a in found if a is not None) | addresses(socket.gethostname())


def shown(found: frozenset[Address]) -> str:
    return ", ".join(sorted(map(str, found))) or "does not resolve"
