"""Group ranks by stack and name the straggler or the collective deadlock. Pure: no I/O.

A rank's *spot* is where its own code is (the innermost frame outside torch, the standard
library and noderun's runtime) and what it is doing there: a collective (``all_reduce``…),
data loading, or the function itself. Ranks at the same spot are one group. When some ranks
wait in a collective and others are not in one, those others hold everyone up; when every rank
waits in a collective but not the same one, the ranks call different collectives: a deadlock.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Sequence
from typing import Any

from noderun.stacks.model import Frame, RankStack

# torch.distributed functions a rank blocks in until its peers call the same one
COLLECTIVES = frozenset(
    {
        "all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_object", "reduce",
        "reduce_scatter", "reduce_scatter_tensor", "broadcast", "broadcast_object_list",
        "barrier", "monitored_barrier", "gather", "gather_object", "scatter",
        "scatter_object_list", "all_to_all", "all_to_all_single", "send", "recv",
        "batch_isend_irecv", "init_process_group", "new_group",
    }
)  # fmt: skip
# library places that are a wait on peers too, with the name to show (DDP syncs in backward)
_WAITS = (("torch/autograd/", "backward (DDP gradient all_reduce)"),)
_ACTIVITIES = (("torch/utils/data/", "data loading"),)


@dataclasses.dataclass(frozen=True)
class Spot:
    """Where one rank's code is and what it does there."""

    label: str  # "all_reduce", "data loading", "load_batch()"
    where: Frame | None  # the innermost user frame
    callers: tuple[Frame, ...]  # the user frames outside it, innermost first
    collective: bool

    def describe(self) -> str:
        """``all_reduce in step() at train.py:42 ← main()``, ``load() at data.py:17 ← step()``."""
        if self.where is None:
            return self.label
        inside = "" if self.label == f"{self.where.function}()" else f" in {self.where.function}()"
        text = f"{self.label}{inside.replace(' in <module>()', '')} at {self.where.where()}"
        caller = self.callers[0].function if self.callers else None
        return f"{text} ← {caller}()" if caller and caller != "<module>" else text

    @property
    def key(self) -> tuple[object, ...]:
        return (self.label, self.where, self.callers)


def spot_of(frames: Sequence[Frame]) -> Spot:
    """Classify a main-thread stack (innermost first)."""
    if not frames:
        return Spot("no Python frames", None, (), False)
    # a script installed as a package has no frame outside the libraries: take the innermost
    user = [i for i, f in enumerate(frames) if not f.library] or [0]
    inner = frames[: user[0]]  # the library frames the user's code called into
    where, callers = frames[user[0]], tuple(frames[i] for i in user[1:])
    for frame in reversed(inner):  # outermost first: the API the user called
        if frame.function in COLLECTIVES and "torch/distributed" in frame.file:
            return Spot(frame.function, where, callers, True)
    for marker, label in _WAITS:
        if any(marker in f.file for f in inner):
            return Spot(label, where, callers, True)
    for marker, label in _ACTIVITIES:
        if any(marker in f.file for f in inner):
            return Spot(label, where, callers, False)
    return Spot(f"{(inner[-1] if inner else where).function}()", where, callers, False)


@dataclasses.dataclass(frozen=True)
class Group:
    ranks: tuple[int, ...]
    hosts: tuple[str, ...]
    spot: Spot
    frames: tuple[Frame, ...]  # one member's full stack
    straggler: bool = False

    def line(self) -> str:
        mark = "   <- straggler" if self.straggler else ""
        return f"{rank_list(self.ranks)}: {self.spot.describe()}{mark}"


class Kind(enum.StrEnum):
    STRAGGLER = "stalled-rank"  # ranks outside the collective the others wait in
    DEADLOCK = "collective-deadlock"  # every rank in a collective, not the same one
    WAITING = "stalled-job"  # every rank at the same spot
    NONE = "no-stacks"


@dataclasses.dataclass(frozen=True)
class Verdict:
    kind: Kind
    ranks: tuple[int, ...]  # the ranks named: stragglers, or all for a deadlock
    text: str

    def line(self) -> str:
        """The one line a stall report carries, and ``noderun explain`` reads."""
        return f"{self.kind.value}: {self.text}"


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """The stacks of a job at one instant, grouped, with the verdict."""

    stacks: tuple[RankStack, ...]
    world_size: int | None = None
    notes: tuple[str, ...] = ()  # e.g. py-spy missing: using faulthandler

    @property
    def missing(self) -> tuple[int, ...]:
        seen = {s.rank for s in self.stacks}
        return tuple(r for r in range(self.world_size or 0) if r not in seen)

    def groups(self) -> list[Group]:
        taken = [s for s in self.stacks if s.frames]
        by_key: dict[tuple[object, ...], list[RankStack]] = {}
        spots: dict[tuple[object, ...], Spot] = {}
        for stack in sorted(taken, key=lambda s: s.rank):
            spot = spot_of(stack.frames)
            by_key.setdefault(spot.key, []).append(stack)
            spots[spot.key] = spot
        verdict = self.verdict()
        named = set(verdict.ranks) if verdict.kind is Kind.STRAGGLER else set()
        groups = [
            Group(
                ranks=tuple(s.rank for s in members),
                hosts=tuple(dict.fromkeys(s.host for s in members)),
                spot=spots[key],
                frames=members[0].frames,
                straggler=bool(named) and members[0].rank in named,
            )
            for key, members in by_key.items()
        ]
        return sorted(groups, key=lambda g: (-len(g.ranks), g.ranks))

    def verdict(self) -> Verdict:
        spots = {s.rank: spot_of(s.frames) for s in self.stacks if s.frames}
        hosts = {s.rank: s.host for s in self.stacks}
        waiting = {r: sp for r, sp in spots.items() if sp.collective}
        others = {r: sp for r, sp in spots.items() if not sp.collective}
        missing = self.missing
        if not spots and not missing:
            return Verdict(Kind.NONE, (), "no rank's stack could be taken")
        if not spots:  # no stack at all (the look failed, or every rank is gone)
            return Verdict(Kind.NONE, tuple(missing), f"{rank_list(missing)} gave no stack")
        wait_text = _waiting_text(waiting)
        # found but gave no stack (a stopped process, one that ignores every signal)
        silent = {s.rank: s.error or "no stack" for s in self.stacks if not s.frames}
        if waiting and (others or missing or silent):
            parts = [_rank_at(r, hosts[r], f"stuck in {sp.describe()}") for r, sp in others.items()]
            parts += [_rank_at(r, hosts[r], f"gave no stack ({why})") for r, why in silent.items()]
            if missing:
                parts.append(f"{rank_list(missing)} not running (exited or never started)")
            named = (*others, *silent, *missing)
            return Verdict(Kind.STRAGGLER, tuple(sorted(named)), f"{'; '.join(parts)}{wait_text}")
        if waiting and len({sp.key for sp in waiting.values()}) > 1:
            return Verdict(
                Kind.DEADLOCK,
                tuple(sorted(waiting)),
                "ranks call different collectives, so none completes: "
                + "; ".join(_by_spot(waiting)),
            )
        if len({sp.key for sp in spots.values()}) > 1:  # nobody in a collective: the minority
            groups = _by_spot_ranks(spots)
            majority = max(groups, key=len)
            odd = {r: spots[r] for g in groups if g is not majority for r in g}
            parts = [_rank_at(r, hosts[r], f"in {sp.describe()}") for r, sp in odd.items()]
            rest = f", unlike {rank_list(majority)} in {spots[majority[0]].describe()}"
            return Verdict(Kind.STRAGGLER, tuple(sorted(odd)), "; ".join(parts) + rest)
        spot = next(iter(spots.values()))
        return Verdict(
            Kind.WAITING,
            tuple(sorted(spots)),
            f"every rank ({rank_list(tuple(sorted(spots)))}) is in {spot.describe()}",
        )

    def to_dict(self) -> dict[str, Any]:
        verdict = self.verdict()
        return {
            "world_size": self.world_size,
            "missing": list(self.missing),
            "notes": list(self.notes),
            "verdict": {"kind": verdict.kind.value, "ranks": list(verdict.ranks),
                        "text": verdict.text},
            "groups": [
                {"ranks": list(g.ranks), "hosts": list(g.hosts), "summary": g.spot.describe(),
                 "collective": g.spot.collective, "straggler": g.straggler}
                for g in self.groups()
            ],
            "ranks": [s.to_dict() for s in sorted(self.stacks, key=lambda s: s.rank)],
        }  # fmt: skip


def rank_list(ranks: Sequence[int]) -> str:
    """``rank 1`` / ``ranks 0,2,3``."""
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {','.join(map(str, ranks))}"


def _rank_at(rank: int, host: str, what: str) -> str:
    return f"rank {rank} on {host} {what}" if host else f"rank {rank} {what}"


def _by_spot_ranks(spots: dict[int, Spot]) -> list[tuple[int, ...]]:
    keyed: dict[tuple[object, ...], list[int]] = {}
    for rank in sorted(spots):
        keyed.setdefault(spots[rank].key, []).append(rank)
    return [tuple(ranks) for ranks in keyed.values()]


def _by_spot(spots: dict[int, Spot]) -> list[str]:
    return [f"{rank_list(g)} in {spots[g[0]].describe()}" for g in _by_spot_ranks(spots)]


def _waiting_text(waiting: dict[int, Spot]) -> str:
    if not waiting:
        return ""
    return ", while " + " and ".join(
        f"{rank_list(g)} {'waits' if len(g) == 1 else 'wait'} in {waiting[g[0]].describe()}"
        for g in _by_spot_ranks(waiting)
    )


def render(snapshot: Snapshot, full: bool = False) -> str:
    """The grouped summary (and with ``full`` every group's whole stack)."""
    lines = []
    for group in snapshot.groups():
        lines.append(group.line())
        if full:
            lines += [f"    {frame}" for frame in group.frames]
    for stack in sorted(snapshot.stacks, key=lambda s: s.rank):
        if not stack.frames:
            lines.append(f"rank {stack.rank}: no stack ({stack.error or 'nothing taken'})")
    if snapshot.missing:
        lines.append(f"{rank_list(snapshot.missing)}: no live process found")
    return "\n".join(lines)
