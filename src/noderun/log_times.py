"""``logs/rank<R>.log.times``: when each part of a rank log was written, so `noderun logs --since`
can cut inside a log whose lines carry no time of their own.

The launcher's log router appends one line ``<epoch second> <byte offset>`` to it at the first
line a rank writes in each second: the offset in ``rank<R>.log`` where that second's lines
begin (at most one line per second of output: ~20 bytes). Standard library only.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

SUFFIX = ".times"


def index_path(log: Path) -> Path:
    """``logs/rank0.log`` -> ``logs/rank0.log.times``."""
    return log.with_name(log.name + SUFFIX)


def entry(second: int, offset: int) -> str:
    return f"{second} {offset}\n"


def read_entries(index: Path) -> list[tuple[int, int]] | None:
    """(second, offset) in the order written; None when there is no index (a log that
    noderun's router did not write); a torn last line is skipped."""
    try:
        text = index.read_text(errors="replace")
    except OSError:
        return None
    found = []
    for line in text.splitlines():
        words = line.split()
        if len(words) == 2 and words[0].isdigit() and words[1].isdigit():
            found.append((int(words[0]), int(words[1])))
    return found


def offset_since(log: Path, since: float) -> int | None:
    """Where the lines written at or after ``since`` (to the second) begin in ``log``; its
    size when none was; None when ``log`` has no index (the caller falls back on the lines'
    own times). What precedes the first indexed second (written before there was an index)
    counts as written then."""
    entries = read_entries(index_path(log))
    if entries is None:
        return None
    try:
        size = os.path.getsize(log)
    except OSError:
        return None
    first = math.floor(since)
    for position, (second, offset) in enumerate(entries):
        if second >= first:
            return 0 if position == 0 or offset > size else offset
    return size
