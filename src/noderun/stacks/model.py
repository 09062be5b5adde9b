"""One rank's Python stack, from py-spy's JSON or faulthandler's text. Pure: no I/O."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from typing import Any

# frames from these places are machinery; the first frame outside them is the script's own
_LIBRARY = ("/site-packages/", "/dist-packages/", "/noderun/runtime/", "<frozen ")
_STDLIB = re.compile(r"/lib/python3\.\d+/")
_FH_THREAD = re.compile(r"^(Current thread|Thread) 0x[0-9a-f]+ ")
_FH_FRAME = re.compile(r'^\s+File "(.*)", line (\d+) in (.+)$')


@dataclasses.dataclass(frozen=True)
class Frame:
    """A Python frame: function, file and line being run."""

    function: str
    file: str
    line: int

    @property
    def library(self) -> bool:
        """True for torch, the standard library, noderun's runtime: not the user's code."""
        return any(mark in self.file for mark in _LIBRARY) or bool(_STDLIB.search(self.file))

    @property
    def short_file(self) -> str:
        return self.file.rsplit("/", 1)[-1]

    def where(self) -> str:
        return f"{self.short_file}:{self.line}"

    def __str__(self) -> str:
        return f"{self.function} ({self.file}:{self.line})"


@dataclasses.dataclass(frozen=True)
class RankStack:
    """The main thread's frames of one rank, innermost first; ``error`` when none was taken."""

    rank: int
    host: str
    pid: int
    frames: tuple[Frame, ...] = ()
    source: str = "py-spy"  # or "faulthandler", or "" when no stack could be taken
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "host": self.host,
            "pid": self.pid,
            "source": self.source,
            "error": self.error,
            "frames": [dataclasses.asdict(f) for f in self.frames],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RankStack:
        return cls(
            rank=int(data["rank"]),
            host=str(data.get("host", "")),
            pid=int(data.get("pid", 0)),
            frames=tuple(
                Frame(str(f["function"]), str(f["file"]), int(f["line"]))
                for f in data.get("frames", ())
            ),
            source=str(data.get("source", "")),
            error=None if data.get("error") is None else str(data["error"]),
        )


def frames_from_py_spy(threads: Sequence[Mapping[str, Any]]) -> tuple[Frame, ...]:
    """The main thread of ``py-spy dump --json`` (innermost first, as py-spy lists them)."""
    if not threads:
        return ()
    main = next((t for t in threads if t.get("thread_name") == "MainThread"), None)
    if main is None:  # no thread names: the main thread's OS id is the process id
        main = next((t for t in threads if t.get("os_thread_id") == t.get("pid")), threads[0])
    return tuple(
        Frame(str(f.get("name", "?")), str(f.get("filename", "?")), int(f.get("line", 0)))
        for f in main.get("frames", ())
    )


def frames_from_faulthandler(text: str) -> tuple[Frame, ...]:
    """The main thread of a faulthandler dump: its last thread block (oldest thread state)."""
    blocks: list[list[Frame]] = []
    for line in text.splitlines():
        if _FH_THREAD.match(line):
            blocks.append([])
        elif (match := _FH_FRAME.match(line)) and blocks:
            blocks[-1].append(Frame(match.group(3), match.group(1), int(match.group(2))))
    return tuple(blocks[-1]) if blocks else ()
