"""Expand SLURM host lists such as ``gpu-a[001-004,010],gpu-b7`` without calling scontrol."""

from __future__ import annotations

import re

from noderun.errors import TopologyError

_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


def _split_top_level(text: str) -> list[str]:
    """Split on commas outside brackets: ``a[1,2],b`` -> ``['a[1,2]', 'b']``."""
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for char in text:
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    if depth != 0:
        raise TopologyError(
            f"unbalanced brackets in host list {text!r}", "check SLURM_JOB_NODELIST"
        )
    parts.append("".join(current))
    return [p for p in parts if p]


def _expand_ranges(body: str, source: str) -> list[str]:
    """``001-003,010`` -> ``['001', '002', '003', '010']`` keeping zero padding."""
    out: list[str] = []
    for item in body.split(","):
        match = _RANGE.match(item.strip())
        if not match:
            raise TopologyError(
                f"bad range {item!r} in host list {source!r}", "check the node list"
            )
        start, end = match.group(1), match.group(2) or match.group(1)
        width = len(start)
        if int(end) < int(start):
            raise TopologyError(f"descending range {item!r} in host list {source!r}", "")
        out.extend(str(n).zfill(width) for n in range(int(start), int(end) + 1))
    return out


def _expand_one(pattern: str, source: str) -> list[str]:
    """Expand one host pattern, which may hold several bracket groups."""
    match = re.search(r"\[([^\]]*)\]", pattern)
    if not match:
        return [pattern]
    prefix, suffix = pattern[: match.start()], pattern[match.end() :]
    return [
        host
        for value in _expand_ranges(match.group(1), source)
        for host in _expand_one(prefix + value + suffix, source)
    ]


def expand_hostlist(text: str) -> list[str]:
    """``'node[1-2],login'`` -> ``['node1', 'node2', 'login']``; order is SLURM's order."""
    text = text.strip()
    if not text:
        return []
    return [host for part in _split_top_level(text) for host in _expand_one(part, text)]


def tasks_per_node(text: str) -> list[int]:
    """Expand ``SLURM_TASKS_PER_NODE`` such as ``'2(x3),1'`` -> ``[2, 2, 2, 1]``."""
    counts: list[int] = []
    for item in text.split(","):
        match = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", item)
        if not match:
            raise TopologyError(f"bad tasks-per-node value {text!r}", "check SLURM_TASKS_PER_NODE")
        counts.extend([int(match.group(1))] * int(match.group(2) or 1))
    return counts


def compress_hostlist(hosts: list[str]) -> str:
    """The short form of ``hosts`` (deduplicated, sorted): numbered hosts of one prefix and
    zero padding become one bracket range, as SLURM writes them.

    >>> compress_hostlist(["node2", "node1", "node3", "login", "gpu07", "gpu09", "node1"])
    'gpu[07,09],login,node[1-3]'
    >>> compress_hostlist(["n9", "n10", "n11"]), compress_hostlist(["g08", "g09", "g10"])
    ('n[9-11]', 'g[08-10]')
    """
    by_prefix: dict[str, set[str]] = {}
    parts: list[str] = []
    for host in set(hosts):
        match = re.fullmatch(r"(.*?)(\d+)", host)
        if match is None:
            parts.append(host)
        else:
            by_prefix.setdefault(match.group(1), set()).add(match.group(2))
    for prefix, digits in by_prefix.items():
        widths = {len(d) for d in digits if d.startswith("0") and len(d) > 1}
        width = widths.pop() if len(widths) == 1 else 0
        if all(d == str(int(d)).zfill(width) for d in digits):
            parts.append(_bracket(prefix, sorted(int(d) for d in digits), width))
        else:  # mixed padding: one group per digit count, as written
            for size in {len(d) for d in digits}:
                numbers = sorted(int(d) for d in digits if len(d) == size)
                parts.append(_bracket(prefix, numbers, size))
    return ",".join(sorted(parts))


def _bracket(prefix: str, numbers: list[int], width: int) -> str:
    """``node``, [1, 2, 3, 5], 0 -> ``node[1-3,5]``; a single number needs no brackets."""
    if len(numbers) == 1:
        return f"{prefix}{str(numbers[0]).zfill(width)}"
    ranges: list[str] = []
    start = previous = numbers[0]
    for number in [*numbers[1:], None]:
        if number is not None and number == previous + 1:
            previous = number
            continue
        first, last = str(start).zfill(width), str(previous).zfill(width)
        ranges.append(first if start == previous else f"{first}-{last}")
        if number is not None:
            start = previous = number
    return f"{prefix}[{','.join(ranges)}]"
