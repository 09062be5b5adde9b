"""What the CLI prints besides plain lines: a table of PASS/WARN/FAIL rows, rich on a terminal,
aligned plain text when piped (used by `doctor`, `verify`), and every verb's ``--json``."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, TextIO

# "schema" of every verb's --json object: raised when a field changes meaning or goes away
# (a new field does not raise it), so a script can refuse an output it does not know
JSON_SCHEMA = 1


def json_text(payload: Mapping[str, Any], indent: int | None = 2) -> str:
    """``payload`` as one JSON object, ``"schema"`` first."""
    return json.dumps({"schema": JSON_SCHEMA, **payload}, indent=indent, default=str)


def print_json(payload: Mapping[str, Any], stream: TextIO | None = None) -> None:
    out = stream or sys.stdout
    out.write(json_text(payload) + "\n")
    out.flush()


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Everything written to stdout meanwhile (this process's lines, and the ranks' and tools'
    output through fd 1) goes to stderr: stdout is kept for the one JSON object ``--json``
    promises at the end."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 1)
        os.close(saved)


STATUS_STYLES = {"PASS": "green", "WARN": "yellow", "FAIL": "bold red", "SKIP": "dim"}


def print_table(
    title: str,
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    stream: TextIO | None = None,
) -> None:
    """Cells that are a status word (PASS, WARN, FAIL, SKIP) are coloured on a terminal."""
    out = stream or sys.stdout
    if out.isatty():
        _print_rich(title, headers, rows, out)
    else:
        out.write(render_plain(title, headers, rows))
    out.flush()


def render_plain(title: str, headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Columns padded to their widest cell; the last column is not padded."""
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]

    def line(cells: Sequence[str]) -> str:
        padded = [str(c).ljust(w) for c, w in zip(cells[:-1], widths[:-1], strict=True)]
        return "  ".join([*padded, str(cells[-1])]).rstrip()

    return "\n".join([title, line(headers), *(line(r) for r in rows)]) + "\n"


def _print_rich(
    title: str, headers: Sequence[str], rows: Sequence[Sequence[str]], out: TextIO
) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    table = Table(title=title, title_justify="left")
    for header in headers:
        table.add_column(header, overflow="fold")
    for row in rows:
        # Text, not markup: log excerpts hold brackets like "[rank0]:"
        table.add_row(*(Text(str(c), style=STATUS_STYLES.get(str(c), "")) for c in row))
    Console(file=out).print(table)
