"""Every rank's Python stack, grouped, with the straggler or the deadlock named."""

from noderun.stacks.analysis import Group, Kind, Snapshot, Verdict, render
from noderun.stacks.model import Frame, RankStack

__all__ = ["Frame", "Group", "Kind", "RankStack", "Snapshot", "Verdict", "render"]
