"""``noderun logs RUN|JOB``: the ranks' logs of a finished or running run; ``-f`` follows."""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from noderun import log_times
from noderun.errors import UsageError
from noderun.verbs.options import (
    OptionTable,
    non_negative_int,
    positional,
    switch,
    value,
)

if TYPE_CHECKING:
    from noderun.verbs.run_facts import Observed

POLL_SEC = 0.25  # new lines are looked for this often while following
STATUS_SEC = 1.0  # whether the run still goes on, this often (SLURM: one scontrol call)

OPTIONS = OptionTable(
    "logs",
    (
        positional("target", metavar="RUN|JOB", help="run directory, or a SLURM job id"),
        switch("-f", "--follow", help="follow the logs until the run ends (Ctrl-C leaves)"),
        value("--rank", type=non_negative_int, env=False, help="only this rank's log"),
        value("--node", type=non_negative_int, env=False, help="only the ranks of this node"),
        value("--grep", metavar="RE", env=False, help="only lines matching this regex"),
        value(
            "--since",
            metavar="T",
            env=False,
            help="only what was written since T: 10m, 1h30m, 2d or 2026-11-26T03:00 (UTC), "
            "to the second (noderun records when each rank log line was written; a log it did "
            "not write is cut by the time its lines start with, if they have one)",
        ),
    ),
    help="print (or follow, -f) the ranks' logs of a run, local, SSH or SLURM",
    description="Print the ranks' logs of a run (or of the run of a SLURM job id), rank by "
    "rank, each line after `R| ` when there are several; -f prints what they write next, "
    "until the run ends. Local, SSH and SLURM runs alike: the logs are under the run "
    "directory (logs/rank<R>.log).",
)


def main(args: argparse.Namespace) -> int:
    from noderun import run_view
    from noderun.verbs.run_facts import observe, resolve

    if args.rank is not None and args.node is not None:
        raise UsageError("--rank and --node both given", "pass one of them")
    try:
        pattern = re.compile(args.grep) if args.grep else None
    except re.error as err:
        raise UsageError(
            f"--grep {args.grep!r} is not a regular expression: {err}", "fix the pattern"
        ) from None
    try:
        since = run_view.parse_since(args.since, time.time()) if args.since else None
    except ValueError as err:
        raise UsageError(str(err), "pass one of those") from None
    seen = observe(resolve(args.target))
    files = chosen(seen, args.rank, args.node)
    tails = [_Tail(rank, path, len(files) > 1, pattern, since) for rank, path in files.items()]
    for tail in tails:
        tail.read(first=True, final=not args.follow)
    if not args.follow:
        return 0
    checked = time.monotonic()
    while True:
        time.sleep(POLL_SEC)
        for tail in tails:
            tail.read()
        if time.monotonic() - checked >= STATUS_SEC:
            checked = time.monotonic()
            if observe(seen.run_dir).status not in run_view.LIVE:
                for tail in tails:
                    tail.read(final=True)
                return 0


def chosen(seen: Observed, rank: int | None, node: int | None) -> dict[int, Path]:
    """rank -> log path of the ranks asked for (every rank by default)."""
    from noderun import run_view

    world, nproc = seen.world_size, seen.nproc_per_node
    found = seen.log_files()
    if rank is not None:
        if rank >= world and rank not in found:
            raise UsageError(
                f"--rank {rank}: the run has ranks 0 to {world - 1}", "pass one of them"
            )
        ranks = [rank]
    elif node is not None:
        nodes = max(world // max(nproc, 1), 1)
        if node >= nodes:
            raise UsageError(f"--node {node}: the run has nodes 0 to {nodes - 1}", "pass one")
        ranks = list(run_view.node_ranks(node, nproc))
    else:
        ranks = sorted(set(range(world)) | set(found))
    logs = seen.run_dir / "logs"
    return {r: found.get(r, logs / f"rank{r}.log") for r in ranks}


class _Tail:
    """One rank's log: what was printed of it, the part of a line not yet ended."""

    def __init__(
        self,
        rank: int,
        path: Path,
        prefixed: bool,
        pattern: re.Pattern[str] | None,
        since: float | None,
    ) -> None:
        self.rank = rank
        self.path = path
        self.prefix = f"{rank}| " if prefixed else ""
        self.pattern = pattern
        self.since = since
        self.offset = 0
        self.partial = b""

    def read(self, first: bool = False, final: bool = False) -> None:
        from noderun import run_view

        cut = first and self.since is not None
        try:
            with open(self.path, "rb") as handle:
                if cut and self.since is not None and _older(handle, self.since):
                    handle.seek(0, 2)
                    self.offset = handle.tell()
                    return
                if cut and self.since is not None:
                    # noderun's rank logs: where the lines of `since` begin, from their index
                    indexed = log_times.offset_since(self.path, self.since)
                    if indexed is not None:
                        self.offset, cut = indexed, False
                handle.seek(self.offset)
                data = handle.read()
        except OSError:
            return
        self.offset += len(data)
        data = self.partial + data
        lines = data.split(b"\n")
        self.partial = b"" if final else lines.pop()
        text = [line.decode(errors="replace").rstrip("\r") for line in lines]
        if final and text and text[-1] == "":
            text.pop()
        if cut and self.since is not None:  # no index: the lines' own times, if they have any
            text = run_view.lines_since(text, self.since)
        out = [
            f"{self.prefix}{line}"
            for line in text
            if self.pattern is None or self.pattern.search(line)
        ]
        if out:
            sys.stdout.write("\n".join(out) + "\n")
            sys.stdout.flush()


def _older(handle: object, since: float) -> bool:
    import os

    try:
        return os.fstat(handle.fileno()).st_mtime < since  # type: ignore[attr-defined]
    except OSError:
        return False
