"""Lines that cross ``srun --label``: srun cuts an output line at 1024 bytes, so a long record
(JSON from a helper task on every node) is written as numbered pieces and put back together.
Standard library only: it runs on the nodes (doctor's probe, the stacks helper)."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import socket
import sys
from typing import Any

PIECE = 800  # srun cuts output lines at 1024 bytes
_MESSAGES = itertools.count()


def write_marked(marker: str, text: str) -> None:
    """``text`` as numbered pieces, each one short line written at once: ``marker id k n piece``."""
    ident = f"{socket.gethostname()}-{os.getpid()}-{next(_MESSAGES)}"
    pieces = [text[i : i + PIECE] for i in range(0, len(text), PIECE)] or [""]
    for k, piece in enumerate(pieces):
        line = f"{marker}{ident} {k} {len(pieces)} {piece}\n"
        os.write(sys.stdout.fileno(), line.encode())


def read_marked(output: str, marker: str) -> list[Any]:
    """The JSON values ``write_marked`` wrote, reassembled; an incomplete one is dropped."""
    parts: dict[str, dict[int, str]] = {}
    totals: dict[str, int] = {}
    for line in output.splitlines():
        _, found, rest = line.partition(marker)
        fields = rest.split(" ", 3)
        if not found or len(fields) < 4 or not fields[1].isdigit() or not fields[2].isdigit():
            continue
        ident, k, n, piece = fields[0], int(fields[1]), int(fields[2]), fields[3]
        parts.setdefault(ident, {})[k] = piece
        totals[ident] = n
    values = []
    for ident, pieces in parts.items():
        if len(pieces) == totals[ident]:
            with contextlib.suppress(ValueError):
                values.append(json.loads("".join(pieces[k] for k in range(totals[ident]))))
    return values
