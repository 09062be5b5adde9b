"""Did the ranks form one process group? From the records the rank entry leaves
(``group_watch``): N ranks that never called init_process_group, or each formed a group of
one, trained N times alone — a completed run, but not the distributed one asked for."""

from __future__ import annotations

from noderun import group_watch
from noderun.verify.evidence import RunEvidence
from noderun.verify.model import Check, Expectations, failed, passed, skipped


def check_one_group(ev: RunEvidence, expect: Expectations) -> Check:
    topology = ev.run_record.get("topology") or {}
    world = expect.world_size or topology.get("world_size")
    nnodes = expect.nnodes or topology.get("nnodes") or 1
    if not isinstance(world, int) or world <= 1:
        return skipped("one-group", "one rank: no group to form")
    records = group_watch.read(ev.run_dir)
    if len(records) < world:
        return skipped(
            "one-group", f"{len(records)} of {world} ranks left a group record (rank entry)"
        )
    note = group_watch.not_one_group(ev.run_dir, world, int(nnodes))
    if note:
        problem, _, fix = note.partition("; hint: ")
        return failed("one-group", problem, fix)
    biggest = max(int(r.get("world_size") or 0) for r in records)
    return passed("one-group", f"the ranks formed a group of {biggest}")
