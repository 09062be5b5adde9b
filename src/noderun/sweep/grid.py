"""The grid of a sweep, pure: ``--param lr=1e-3,3e-4 --param batch=32,64`` -> four points.

A point's values reach the script as ``--lr 0.001`` appended to its arguments, or in place
of ``{lr}`` where the arguments name it (then nothing is appended for that name). A point's
name is stable (``lr=0.001,batch=32``): it names its run directory, so a stopped sweep run
again with the same command finds the points it already ran.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
from collections.abc import Sequence

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*\Z")
_SAFE = re.compile(r"[^A-Za-z0-9_.+=,-]")  # anything else in a value becomes _ in the dir name


class ParamError(ValueError):
    """A malformed ``--param``: the message names the problem, ``hint`` the fix."""

    def __init__(self, problem: str, hint: str) -> None:
        super().__init__(problem)
        self.hint = hint


@dataclasses.dataclass(frozen=True)
class Param:
    name: str
    values: tuple[str, ...]


def parse_param(text: str) -> Param:
    """'lr=1e-3,3e-4' -> Param('lr', ('1e-3', '3e-4')); a ParamError names what is wrong."""
    example = "e.g. --param lr=1e-3,3e-4"
    name, sep, rest = text.partition("=")
    name = name.strip()
    if not sep:
        raise ParamError(f"--param {text!r} has no '='", f"write NAME=V1,V2…, {example}")
    if not _NAME.match(name):
        raise ParamError(
            f"--param name {name!r} is not an identifier",
            f"use letters, digits, _ and - (not first), {example}",
        )
    values = tuple(v.strip() for v in rest.split(","))
    if not rest.strip() or any(not v for v in values):
        raise ParamError(f"--param {text!r} has an empty value", f"list values, {example}")
    if len(set(values)) != len(values):
        raise ParamError(f"--param {text!r} repeats a value", "list each value once")
    return Param(name, values)


def check_params(params: Sequence[Param]) -> None:
    names = [p.name for p in params]
    if not params:
        raise ParamError("a sweep needs at least one --param", "e.g. --param lr=1e-3,3e-4")
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ParamError(f"--param {repeated[0]} is given twice", "list its values in one --param")


@dataclasses.dataclass(frozen=True)
class Point:
    """One combination of the grid: ``(("lr", "0.001"), ("batch", "32"))``."""

    values: tuple[tuple[str, str], ...]
    index: int = 0

    @property
    def name(self) -> str:
        """'lr=0.001,batch=32': the run directory's name (unsafe characters become _)."""
        return _SAFE.sub("_", ",".join(f"{k}={v}" for k, v in self.values))

    def as_dict(self) -> dict[str, str]:
        return dict(self.values)


def expand(params: Sequence[Param]) -> list[Point]:
    """The product of the params, the first param varying slowest, indexed from 0."""
    check_params(params)
    combos = itertools.product(*[[(p.name, v) for v in p.values] for p in params])
    return [Point(tuple(combo), i) for i, combo in enumerate(combos)]


def point_args(script_args: Sequence[str], point: Point) -> list[str]:
    """The script's arguments for ``point``: ``{name}`` replaced where an argument names it,
    ``--name value`` appended for every other name."""
    named = {k for k, _ in point.values if any("{" + k + "}" in a for a in script_args)}
    args = list(script_args)
    for key, val in point.values:
        if key in named:
            args = [a.replace("{" + key + "}", val) for a in args]
    for key, val in point.values:
        if key not in named:
            args += [f"--{key}", val]
    return args
