"""What verify produces: one Check per question, gathered in a Report with a few facts."""

from __future__ import annotations

import dataclasses
from typing import Any

from noderun.check_result import Check, Status, failed, passed, skipped, warned

__all__ = ["Check", "Expectations", "Report", "Status", "failed", "passed", "skipped", "warned"]


@dataclasses.dataclass(frozen=True)
class Expectations:
    """What the user asked for; None means "whatever run.json recorded"."""

    world_size: int | None = None
    nnodes: int | None = None
    backend: str | None = None
    epochs: int | None = None
    skip: frozenset[str] = frozenset()
    # checks whose evidence must exist: a SKIP for lack of it becomes a FAIL
    require: frozenset[str] = frozenset()


@dataclasses.dataclass
class Report:
    """All checks of one run, plus summary facts (epochs, final loss, throughput...)."""

    target: str
    checks: list[Check] = dataclasses.field(default_factory=list)
    facts: dict[str, Any] = dataclasses.field(default_factory=dict)
    failed_run: bool = False

    @property
    def healthy(self) -> bool:
        return not any(c.status is Status.FAIL for c in self.checks)

    def add(self, check: Check) -> None:
        self.checks.append(check)

    def to_dict(self) -> dict[str, Any]:
        return {
            "run": self.target,
            "healthy": self.healthy,
            "checks": [c.to_dict() for c in self.checks],
            "facts": self.facts,
        }
