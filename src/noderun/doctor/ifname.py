"""Which interfaces ``NCCL_SOCKET_IFNAME`` and ``GLOO_SOCKET_IFNAME`` select, by each library's
own rule. Pure: a setting and an interface name in, a yes/no and the reason out.

NCCL (``findInterfaces`` in its socket code, and its environment-variable documentation): an
optional ``^`` (exclude what matches) then an optional ``=`` (exact names, not prefixes), both
applying to the whole comma list; each entry may end in ``:port``, which names no interface.
``eth`` selects eth0 and eth1; ``=eth0`` only eth0; ``^docker,lo`` everything but docker*/lo*.

gloo (torch's ProcessGroupGloo): a comma list of exact interface names, one device each;
no prefixes and no ``^``/``=`` (``^docker`` is looked up as an interface called "^docker").
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Selection:
    selected: bool
    reason: str


def nccl_selects(setting: str, iface: str) -> Selection:
    """Does ``NCCL_SOCKET_IFNAME=setting`` let NCCL use ``iface``?

    >>> nccl_selects("^docker,lo", "eth0").selected
    True
    >>> nccl_selects("=eth", "eth0").selected
    False
    """
    spec = setting
    exclude = spec.startswith("^")
    spec = spec[1:] if exclude else spec
    exact = spec.startswith("=")
    spec = spec[1:] if exact else spec
    names = [item.split(":")[0] for item in spec.split(",") if item.split(":")[0]]
    how = "exact names" if exact else "prefixes"
    hit = next((n for n in names if (iface == n if exact else iface.startswith(n))), None)
    if exclude:
        if hit is None:
            return Selection(True, f"{iface} is not excluded by {how} {', '.join(names)}")
        return Selection(False, f"{iface} is excluded ({'^' + setting[1:]} matches {hit})")
    if hit is not None:
        return Selection(True, f"{iface} matches {'=' if exact else ''}{hit}")
    if not names:
        return Selection(False, "the list is empty: NCCL finds no interface")
    return Selection(False, f"{iface} matches none of the {how} {', '.join(names)}")


def gloo_selects(setting: str, iface: str) -> Selection:
    """Does ``GLOO_SOCKET_IFNAME=setting`` make gloo use ``iface``? Exact names only."""
    names = [n for n in setting.split(",") if n]
    odd = [n for n in names if n[:1] in ("^", "=")]
    if odd:
        return Selection(False, f"gloo takes exact interface names, {odd[0]!r} is NCCL's syntax")
    if iface in names:
        return Selection(True, f"{iface} is listed")
    return Selection(False, f"{iface} is not among {', '.join(names) or 'no names'}")


RULES = {"NCCL_SOCKET_IFNAME": nccl_selects, "GLOO_SOCKET_IFNAME": gloo_selects}
