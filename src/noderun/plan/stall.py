"""StallPolicy: when a job counts as stalled and what noderun does then. Pure."""

from __future__ import annotations

import dataclasses
import enum

DEFAULT_STALL_TIMEOUT = 300.0


class OnStall(enum.StrEnum):
    """What the supervisor does once it has reported a stall."""

    REPORT = "report"  # stacks + report, the job keeps waiting (it may recover)
    KILL = "kill"  # stacks + report, then the gang is torn down with EXIT_STALLED


@dataclasses.dataclass(frozen=True)
class StallPolicy:
    """``timeout`` seconds without progress is a stall; 0 turns the watch off."""

    timeout: float = DEFAULT_STALL_TIMEOUT
    action: OnStall = OnStall.REPORT

    @property
    def enabled(self) -> bool:
        return self.timeout > 0

    def argv(self) -> list[str]:
        """``noderun run`` options for this policy; none when it is the default."""
        options = []
        if self.timeout != DEFAULT_STALL_TIMEOUT:
            options.append(f"--stall-timeout={self.timeout:g}")
        if self.action is not OnStall.REPORT:
            options.append(f"--on-stall={self.action.value}")
        return options
