"""Checks of the process group: did every rank join, with the world size and backend asked?

From noderun's runtime.json when the ranks ran ``noderun.init()``; otherwise from what the
libraries printed themselves (Lightning: ``All distributed processes registered. Starting with
N processes``, ``distributed_backend=gloo``), and SKIP with the reason when nothing says.
"""

from __future__ import annotations

from noderun.verify.evidence import RunEvidence
from noderun.verify.model import Check, Expectations, failed, passed, skipped, warned
from noderun.verify.one_group import check_one_group

_PLAIN = "no sign of noderun.init() (no runtime.json, noderun metrics.csv or checkpoints/)"


def _asked(ev: RunEvidence, key: str, explicit: int | None) -> int | None:
    if explicit is not None:
        return explicit
    value = (ev.run_record.get("topology") or {}).get(key)
    return value if isinstance(value, int) else None


def check_runtime_json(ev: RunEvidence, _: Expectations) -> Check:
    if not ev.runtime.ok and not ev.noderun_runtime:
        return skipped("runtime-json", f"{_PLAIN}: judged from the launcher and the logs")
    if not ev.runtime.ok:
        return failed(
            "runtime-json",
            f"{ev.runtime.error}: rank 0 never finished noderun.init()",
            "call ctx = noderun.init() at the start of the script",
        )
    record = ev.runtime_record
    world = record.get("world_size")
    if isinstance(world, int) and world > 1 and not record.get("process_group_initialized"):
        return failed("runtime-json", f"world of {world} but no process group was initialized")
    launcher = (record.get("topology") or {}).get("launcher", "?")
    return passed(
        "runtime-json",
        f"process group initialized ({launcher}, init {record.get('init_seconds', '?')} s)"
        if record.get("process_group_initialized")
        else "single process, no process group",
    )


def _registered(ev: RunEvidence) -> int | None:
    sign = ev.signs.get("registered")
    return int(sign.value) if sign and sign.value.isdigit() else None


def check_ddp_init(ev: RunEvidence, expect: Expectations) -> Check:
    """Every rank took part in the process group: each sent its host through it (gather)."""
    runtime = ev.runtime_record
    if not runtime and ev.noderun_runtime:
        return failed("ddp-init", "no runtime.json: DDP initialization is not confirmed")
    if not runtime:
        sign = ev.signs.get("registered")
        if sign is None:
            return skipped("ddp-init", f"{_PLAIN}, and no log line says the group formed")
        return passed("ddp-init", f"{sign.text} ({sign.where})")
    world = runtime.get("world_size")
    hosts = runtime.get("rank_hosts") or []
    if isinstance(world, int) and world > 1 and not runtime.get("process_group_initialized"):
        return failed("ddp-init", f"world of {world} but the process group never initialized")
    if len(hosts) != world:
        return failed("ddp-init", f"{len(hosts)} of {world} ranks reported in through the group")
    distinct = sorted(set(hosts))
    nodes = _asked(ev, "nnodes", expect.nnodes)
    if ev.run_record.get("backend") == "slurm" and nodes and len(distinct) != nodes:
        return failed(
            "ddp-init",
            f"ranks ran on {len(distinct)} host(s) ({', '.join(distinct)}), {nodes} node(s) asked",
            "check the srun step spans every node of the allocation",
        )
    return passed(
        "ddp-init",
        f"all {world} ranks joined the {runtime.get('backend')} group on {', '.join(distinct)}",
    )


def check_world_size(ev: RunEvidence, expect: Expectations) -> Check:
    asked = _asked(ev, "world_size", expect.world_size)
    asked_nodes = _asked(ev, "nnodes", expect.nnodes)
    runtime = ev.runtime_record
    if not runtime and ev.noderun_runtime:
        return failed("world-size", "no runtime.json: the world size the ranks saw is unknown")
    if not runtime:
        seen = _registered(ev)
        if seen is None:
            return skipped("world-size", f"{_PLAIN}, and no log line gives the world size")
        if asked is not None and seen != asked:
            return failed(
                "world-size",
                f"{seen} processes registered ({ev.signs['registered'].where}), {asked} asked",
                "check --nnodes/--nproc-per-node and the script's devices/num_nodes",
            )
        return passed("world-size", f"{seen} processes registered{', as asked' if asked else ''}")
    world = runtime.get("world_size")
    hosts = runtime.get("rank_hosts") or []
    nodes = (runtime.get("topology") or {}).get("nnodes")
    if asked is None:
        return warned("world-size", f"{world} ranks; nothing recorded to compare with")
    if world != asked:
        return failed(
            "world-size",
            f"ranks saw world size {world}, {asked} was asked",
            "check --nnodes/--nproc-per-node and that every node started",
        )
    if hosts and len(hosts) != world:
        return failed("world-size", f"{len(hosts)} ranks reported a host, world size is {world}")
    if asked_nodes is not None and nodes is not None and nodes != asked_nodes:
        return failed("world-size", f"ranks saw {nodes} nodes, {asked_nodes} were asked")
    return passed("world-size", f"{world} ranks on {nodes or '?'} node(s), as asked")


def check_backend(ev: RunEvidence, expect: Expectations) -> Check:
    runtime = ev.runtime_record
    asked = expect.backend or ev.run_record.get("requested_backend")
    if not runtime and ev.noderun_runtime:
        return failed("backend", "no runtime.json: the backend is unknown")
    if not runtime:
        sign = ev.signs.get("backend")
        if sign is None:
            return skipped("backend", f"{_PLAIN}, and no log line names the backend")
        if asked and sign.value != asked:
            return failed("backend", f"backend {sign.value} ({sign.where}), {asked} was asked")
        return passed("backend", f"{sign.value} ({sign.where})")
    backend, device = runtime.get("backend"), str(runtime.get("device", ""))
    if asked and backend != asked:
        return failed("backend", f"backend {backend}, {asked} was asked", "set NODERUN_BACKEND")
    if backend == "nccl" and not device.startswith("cuda"):
        return failed("backend", f"nccl on device {device}", "nccl needs CUDA; use gloo on CPU")
    if backend == "gloo" and device.startswith("cuda"):
        return warned("backend", f"gloo on {device}: works, but slow", "use nccl with CUDA")
    return passed("backend", f"{backend} on {device}")


GROUP_CHECKS = {
    "runtime-json": check_runtime_json,
    "ddp-init": check_ddp_init,
    "world-size": check_world_size,
    "backend": check_backend,
    "one-group": check_one_group,
}
