"""One checked fact with PASS/WARN/FAIL/SKIP and a one-line fix: what verify and doctor report."""

from __future__ import annotations

import dataclasses
import enum


class Status(enum.Enum):
    PASS = "PASS"
    WARN = "WARN"
    FAIL = "FAIL"
    SKIP = "SKIP"


@dataclasses.dataclass(frozen=True)
class Check:
    """One verified fact: ``Check("metrics.csv", Status.PASS, "8 rows")``."""

    name: str
    status: Status
    detail: str
    fix: str = ""

    def to_dict(self) -> dict[str, str]:
        return {
            "check": self.name,
            "status": self.status.value,
            "detail": self.detail,
            "fix": self.fix,
        }


def passed(name: str, detail: str) -> Check:
    return Check(name, Status.PASS, detail)


def failed(name: str, detail: str, fix: str = "") -> Check:
    return Check(name, Status.FAIL, detail, fix)


def warned(name: str, detail: str, fix: str = "") -> Check:
    return Check(name, Status.WARN, detail, fix)


def skipped(name: str, detail: str) -> Check:
    return Check(name, Status.SKIP, detail)
