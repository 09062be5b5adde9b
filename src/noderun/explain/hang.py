"""A job that hangs at start-up, named while it hangs: who joined, who never started. Pure.

Lightning prints ``Initializing distributed: GLOBAL_RANK: r, MEMBER: r+1/N`` on every rank that
exists; a batch script that runs ``python`` without ``srun`` starts one process, which prints
``MEMBER: 1/N`` and then waits for ranks that were never launched (30 minutes by default, an
hour in seed 002). A log that shows fewer than N members and nothing since, for longer than a
threshold, is that mistake; no need to wait for the timeout.
"""

from __future__ import annotations

import dataclasses
import re

from noderun.explain.findings import Evidence, Finding
from noderun.explain.signatures import Tier

_MEMBER = re.compile(r"GLOBAL_RANK: (\d+), MEMBER: (\d+)/(\d+)")
_REGISTERED = re.compile(r"All distributed processes registered")
DEFAULT_QUIET = 20.0  # seconds without output after a partial MEMBER list


@dataclasses.dataclass(frozen=True)
class Startup:
    """What a log says about start-up: the world size announced and the ranks that arrived."""

    world: int
    members: frozenset[int]
    registered: bool
    first_line: int
    first_text: str

    @property
    def missing(self) -> int:
        return self.world - len(self.members)


def read_startup(text: str) -> Startup | None:
    """The start-up announced in ``text``, or None if no rank announced itself."""
    world, members, registered, first = 0, set[int](), False, (0, "")
    for number, line in enumerate(text.splitlines(), start=1):
        match = _MEMBER.search(line)
        if match:
            members.add(int(match.group(1)))
            world = max(world, int(match.group(3)))
            first = first if first[0] else (number, line.strip())
        elif _REGISTERED.search(line):
            registered = True
    if not world:
        return None
    return Startup(world, frozenset(members), registered, *first)


def hang_finding(
    text: str, log_name: str, quiet_for: float, threshold: float = DEFAULT_QUIET
) -> Finding | None:
    """missing-launcher when fewer than N ranks announced themselves and the log went quiet."""
    startup = read_startup(text)
    if startup is None or startup.registered or startup.missing <= 0 or quiet_for < threshold:
        return None
    joined = ",".join(str(r) for r in sorted(startup.members))
    return Finding(
        cause="missing-launcher",
        summary=(
            f"hanging at start-up: {len(startup.members)}/{startup.world} ranks started "
            f"(rank {joined}) and the log has been quiet for {quiet_for:.0f} s; the other "
            f"{startup.missing} were never launched (python run without srun), so the job "
            "waits for its rendezvous timeout"
        ),
        fix=(
            "cancel it (scancel JOB) and start every rank with srun in the batch script: "
            "srun python SCRIPT … (check it first with `noderun check JOB.sbatch`)"
        ),
        evidence=Evidence(log_name, startup.first_line, startup.first_text),
        tier=Tier.ROOT,
        time=None,
    )
