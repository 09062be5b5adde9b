"""run.json as one typed record: what ran where, how each attempt ended, and who follows it.

``rundir.read_record`` and ``rundir.write_record`` are its only reader and writer; the JSON
keeps the field names verify, explain and older noderun releases read (an unset field is left
out; keys this release does not know are kept as they were). No I/O here."""

from __future__ import annotations

import dataclasses
import os
import platform
import socket
import time
from typing import Any

from noderun.outcome import Outcome


@dataclasses.dataclass
class RunShape:
    """``topology``: how many nodes and ranks, and where they meet."""

    nnodes: int
    nproc_per_node: int
    world_size: int
    master_addr: str
    master_port: int | None = None


@dataclasses.dataclass
class FailureRecord:
    """``failure``: the first failing rank (or node), its exit code, and why."""

    reason: str
    rank: int | None = None
    exit_code: int | None = None
    node_rank: int | None = None
    local_rank: int | None = None


FOLLOW_STOPPED = "follow_stopped"  # timeline stage: the follower left the accounting to the job


@dataclasses.dataclass
class Follower:
    """``follower``: the `submit --wait` that writes the job's accounting once the job ended
    (the launcher then leaves it out, and the job ends sooner)."""

    host: str
    pid: int
    since: float  # epoch seconds: its FOLLOW_STOPPED stamp, if any, comes later

    @classmethod
    def this_process(cls) -> Follower:
        return cls(host=socket.gethostname(), pid=os.getpid(), since=time.time())

    def alive(self) -> bool:
        """False only when it is known gone: a process of this host that has exited (another
        host's cannot be checked from here)."""
        return self.host != socket.gethostname() or pid_alive(self.pid)


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` of this host exists (one of another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


@dataclasses.dataclass
class RunRecord:
    """One attempt of a run (the newest at the top level), the earlier ones in ``attempts``."""

    backend: str
    status: str = "running"
    command: list[str] | None = None
    mode: str | None = None
    job_id: str | None = None
    restart_count: int | None = None
    script: str | None = None
    script_args: list[str] | None = None
    entry: str | None = None
    topology: RunShape | None = None
    hosts: list[str] | None = None
    launch: str | None = None  # SLURM: "torchrun" directly on the node, or "srun"
    step_command: list[str] | None = None
    versions: dict[str, str] | None = None
    cwd: str | None = None
    sbatch_script: str | None = None
    submit_time: str | None = None
    start_time: str | None = None
    end_time: str | None = None
    duration_sec: float | None = None
    exit_code: int | None = None
    failure: FailureRecord | None = None
    interrupted_by: str | None = None
    stall: str | None = None
    node_exit_codes: dict[str, int | None] | None = None
    srun_exit_code: int | None = None
    remote_files: dict[str, str] | None = None
    timeline: list[dict[str, Any]] | None = None
    restart: str | None = None  # what followed this attempt: restarted, or why not
    follower: Follower | None = None
    resumed_in_place: bool = False
    attempts: list[RunRecord] = dataclasses.field(default_factory=list)
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)  # keys we do not know

    @property
    def ended(self) -> bool:
        return self.status not in ("submitted", "running")

    def end(self, outcome: Outcome, end_time: str) -> None:
        """This attempt ended as ``outcome``. ``status`` says "failed" for a refused input,
        as it always has (verify reads it); ``exit_code`` 2 tells it apart."""
        self.status = "failed" if outcome.status == "bad-input" else outcome.status
        self.end_time = end_time
        self.duration_sec = round(outcome.duration, 3)
        self.exit_code = outcome.exit_code
        self.failure = (
            FailureRecord(
                reason=outcome.failure, rank=outcome.failure_rank, exit_code=outcome.failure_exit
            )
            if outcome.failure
            else None
        )
        self.interrupted_by = outcome.interrupted_by
        self.stall = outcome.stalled

    def unended(self) -> RunRecord:
        """This record without how its attempt ended (the start of the next attempt)."""
        return dataclasses.replace(
            self,
            end_time=None,
            duration_sec=None,
            exit_code=None,
            failure=None,
            interrupted_by=None,
            stall=None,
            srun_exit_code=None,
            timeline=None,
            restart=None,
        )

    def continued_by(self, fresh: RunRecord) -> RunRecord:
        """``fresh`` (the next attempt) carrying this one and every earlier one in ``attempts``."""
        fresh.attempts = [*self.attempts, dataclasses.replace(self, attempts=[])]
        fresh.resumed_in_place = True
        return fresh

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {}
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if field.name == "extra" or value is None:
                continue
            if field.name == "attempts":
                if value:
                    data["attempts"] = [attempt.to_json() for attempt in value]
            elif field.name == "resumed_in_place":
                if value:
                    data["resumed_in_place"] = True
            elif dataclasses.is_dataclass(value):
                data[field.name] = _plain(value)
            else:
                data[field.name] = value
        return {**self.extra, **data}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunRecord:
        """A record from run.json's object; a value of the wrong shape stays in ``extra``."""
        known = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        record = cls(backend=str(data.get("backend", "")), status=str(data.get("status", "")))
        for key, value in data.items():
            if key not in known:
                record.extra[key] = value
                continue
            try:
                setattr(record, key, _parsed(key, value))
            except (TypeError, ValueError, AttributeError):
                record.extra[key] = value
        return record


_NESTED: dict[str, type] = {"topology": RunShape, "failure": FailureRecord, "follower": Follower}


def _parsed(key: str, value: Any) -> Any:
    if value is None:
        return None
    if key in _NESTED:
        return _NESTED[key](**value)
    if key == "attempts":
        return [RunRecord.from_json(attempt) for attempt in value]
    if key == "job_id":
        return str(value)
    return value


def _plain(value: Any) -> dict[str, Any]:
    """A nested record as JSON; a failure always says its rank and exit code, even unknown."""
    data = dataclasses.asdict(value)
    keep = ("rank", "exit_code") if isinstance(value, FailureRecord) else ()
    return {k: v for k, v in data.items() if v is not None or k in keep}


def versions() -> dict[str, str]:
    """Python's, torch's and noderun's versions for run.json."""
    from importlib import metadata  # ~10 ms to import: SLURM looks it up while srun starts

    return {
        "python": platform.python_version(),
        "torch": metadata.version("torch"),
        "noderun": metadata.version("noderun"),
    }
