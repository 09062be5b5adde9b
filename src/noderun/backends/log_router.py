"""Where every line of a gang goes, for every backend: a rank's to the console with its
``node:rank`` prefix (unless torchrun's --local-ranks-filter hides it) and whole to
``logs/rank<R>.log`` (and when, to ``rank<R>.log.times``: ``log_times``); an agent's to
``logs/node<N>.agent.log``; the launcher's own (srun) to the console and its log. One lock,
so lines of two streams never merge."""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

from noderun import failures, log_times
from noderun.backends.result import WorkerExit
from noderun.errors import os_error_line

WORKER = re.compile(r"^\[default(\d+)\]:(.*)$", re.DOTALL)  # torchrun --tee
_EVENT = '{"name": "torchelastic.worker.status.'  # torchrun --event-log-handler=console


class LogRouter:
    """Routes lines to the console and the run's log files (opened on first use, line
    buffered, closed by ``close``)."""

    def __init__(
        self,
        logs: Path,
        console: IO[str],
        nproc_per_node: int,
        show: Callable[[int], bool] | None = None,
        on_rank_output: Callable[[], None] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.logs = logs
        self.console = console
        self.nproc_per_node = nproc_per_node
        self.show = show or (lambda _local_rank: True)  # torchrun's --local-ranks-filter
        self.on_rank_output = on_rank_output
        self.last_error: dict[int, str] = {}  # rank -> the last exception line it printed
        self.last_agent_line: dict[int, str] = {}  # node -> its agent's last words
        self.worker_exits: dict[int, list[WorkerExit]] = {}  # node -> its failed workers
        self._lock = threading.Lock()
        self._files: dict[str, IO[str]] = {}
        self._unwritable: set[str] = set()
        self._clock = clock
        self._second: dict[str, int] = {}  # rank log -> the last second its index names

    def rank_line(self, prefix: str, rank: int, text: str) -> None:
        """One line of ``rank``: ``prefix:rank| text`` on the console, ``text`` in its log."""
        shown = self.show(rank % self.nproc_per_node)
        with self._lock:
            if shown:
                self.console.write(f"{prefix}:{rank}| {text}\n")
                self.console.flush()
            self._write(f"rank{rank}.log", text, indexed=True)
            if error := failures.exception_line(text):
                self.last_error[rank] = error
        if self.on_rank_output:
            self.on_rank_output()

    def agent_line(self, node: int, text: str, console_line: str | None = None) -> None:
        """One line of node ``node``'s agent (torchrun, or noderun's node entry): to its log,
        and to the console only when ``console_line`` is given. torchrun's worker events are
        kept in ``worker_exits``, not logged."""
        if text.startswith(_EVENT) and self._worker_event(node, text):
            return
        with self._lock:
            if console_line is not None:
                self.console.write(console_line + "\n")
                self.console.flush()
            self._write(f"node{node}.agent.log", text)
            if text.strip():
                self.last_agent_line[node] = text.strip()[:300]

    def launcher_line(self, log: str, text: str) -> None:
        """One line of the launcher's own (srun): to the console and ``log``."""
        with self._lock:
            self.console.write(text + "\n")
            self.console.flush()
            self._write(log, text)

    def torchrun_line(self, node: int, prefix: str, text: str) -> int | None:
        """A line of node ``node``'s torchrun: its worker's (``[default<L>]:``, returns L) or
        the agent's own (returns None)."""
        if match := WORKER.match(text):
            local = int(match.group(1))
            self.rank_line(prefix, node * self.nproc_per_node + local, match.group(2))
            return local
        self.agent_line(node, text)
        return None

    def _worker_event(self, node: int, text: str) -> bool:
        """One event of torchrun's agent (JSON); a failed worker's goes to ``worker_exits``.
        False for a line that is not an event after all."""
        try:
            event = json.loads(text)
            fields = event["metadata"]
            if event.get("source") != "WORKER" or fields.get("state") != "FAILED":
                return True
            worker = json.loads(fields["metadata"])
            stamp = event.get("timestamp")  # torchelastic's events: milliseconds
            ended = WorkerExit(
                rank=int(fields["global_rank"]),
                local_rank=int(worker["local_rank"][0]),
                exit_code=int(worker["exit_code"][0]),
                time=stamp / 1000 if isinstance(stamp, int | float) and stamp > 0 else None,
            )
        except (ValueError, KeyError, TypeError, IndexError, AttributeError):
            return False
        with self._lock:
            self.worker_exits.setdefault(node, []).append(ended)
        return True

    def _write(self, name: str, line: str, indexed: bool = False) -> None:
        """A line to a log file (under the lock), the first of each second ``indexed`` in its
        time index; a failed write (a full disk) is said once per file and the output keeps
        flowing: a reader that stopped would stall the ranks."""
        try:
            handle = self._file(name)
            if indexed and self._second.get(name) != (second := int(self._clock())):
                self._second[name] = second
                with contextlib.suppress(OSError):  # without it --since cuts less finely
                    times = self._file(name + log_times.SUFFIX)
                    times.write(log_times.entry(second, handle.tell()))  # tell(): bytes
            handle.write(line + "\n")
        except OSError as err:
            if name not in self._unwritable:
                self._unwritable.add(name)
                self.console.write(f"noderun: warning: {os_error_line(err)} ({name})\n")
                self.console.flush()

    def _file(self, name: str) -> IO[str]:
        if name not in self._files:
            self._files[name] = open(self.logs / name, "a", buffering=1)  # noqa: SIM115
        return self._files[name]

    def close(self) -> None:
        with self._lock:
            for handle in self._files.values():
                with contextlib.suppress(OSError):
                    handle.close()
            self._files.clear()
