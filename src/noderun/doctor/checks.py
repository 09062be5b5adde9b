"""Turn every node's probe facts into checks: a node x check table with one-line fixes."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from noderun import disk_room
from noderun.check_result import Check, Status, failed, passed, skipped, warned
from noderun.doctor.ifname import RULES as IFNAME_RULES

Facts = dict[str, Any]
MIN_FREE = disk_room.MIN_FREE  # the rule of run and submit (no checkpoint to size from)
CRITICAL_FREE = disk_room.CRITICAL_FREE
SKEW_WARN, SKEW_FAIL = 1.0, 5.0  # seconds
VIRTUAL_IFACES = ("lo", "docker0")


@dataclasses.dataclass(frozen=True)
class NodeCheck:
    node: str
    check: Check

    def to_dict(self) -> dict[str, str]:
        return {"node": self.node, **self.check.to_dict()}


def _version_key(facts: Facts) -> tuple[Any, ...]:
    return tuple(facts.get(k) for k in ("python", "torch", "cuda", "nccl"))


def check_versions(facts: Facts, everyone: Sequence[Facts]) -> Check:
    mine = _version_key(facts)
    common, _ = Counter(_version_key(f) for f in everyone).most_common(1)[0]
    text = "python {}, torch {}, CUDA {}, NCCL {}".format(*(v or "none" for v in mine))
    if mine != common:
        other = "python {}, torch {}, CUDA {}, NCCL {}".format(*(v or "none" for v in common))
        return failed(
            "versions",
            f"{text}; the other nodes have {other}",
            "install the same python, torch, CUDA and NCCL on every node (one shared environment)",
        )
    return passed("versions", text)


def check_devices(facts: Facts, _: Sequence[Facts]) -> Check:
    count, tasks = facts.get("device_count", 0), facts.get("tasks_per_node")
    visible = facts.get("cuda_visible_devices")
    if not count:
        if visible:
            return warned(
                "devices",
                f"CUDA_VISIBLE_DEVICES={visible} but torch sees no GPU",
                "install a CUDA build of torch, or run on CPU with gloo",
            )
        return passed("devices", "no GPU: gloo on CPU")
    if tasks and int(tasks) > count:
        return failed(
            "devices",
            f"{tasks} tasks per node but {count} visible GPU(s)",
            "start at most one rank per GPU (--nproc-per-node), or ask for more GPUs",
        )
    ids = [v for v in (visible or "").split(",") if v.strip()]
    if visible is not None and len(ids) != count:
        return warned("devices", f"CUDA_VISIBLE_DEVICES={visible} but {count} device(s) seen")
    return passed("devices", f"{count} GPU(s), CUDA_VISIBLE_DEVICES={visible or 'unset'}")


def check_master_resolves(facts: Facts, everyone: Sequence[Facts]) -> Check:
    master = facts.get("master") or {}
    if master.get("error") or not master.get("addresses"):
        return failed(
            "master-resolve",
            f"{master.get('host')} does not resolve: {master.get('error')}",
            "use a hostname every node resolves (the first node of the job), or an IP",
        )
    addresses = master["addresses"]
    others = {
        tuple(f["master"]["addresses"]) for f in everyone if f.get("master", {}).get("addresses")
    }
    if len(others) > 1:
        return failed(
            "master-resolve",
            f"{master['host']} -> {', '.join(addresses)} here, other addresses elsewhere",
            "fix /etc/hosts or DNS so every node agrees",
        )
    if not master.get("reverse"):
        return warned(
            "master-resolve",
            f"{master['host']} -> {addresses[0]}, no reverse name",
            "add a PTR/hosts entry: NCCL and gloo log peers by name",
        )
    return passed("master-resolve", f"{master['host']} -> {addresses[0]} -> {master['reverse']}")


def check_master_reachable(facts: Facts, _: Sequence[Facts]) -> Check:
    contact = facts.get("contact") or {}
    if contact.get("foreign"):
        return failed(
            "master-reachable",
            f"the master answers, but {contact.get('error')}",
            "export the same NODERUN_JOB_TOKEN on every machine started by hand (or on none), "
            "or pass another --master-port"
            if contact.get("denied")
            else "stop the stale process on the master's port or pass another --master-port",
        )
    if not contact.get("reachable"):
        return failed(
            "master-reachable",
            f"cannot connect to the master: {contact.get('error')}",
            "check MASTER_ADDR and that the firewall lets the port through",
        )
    return passed("master-reachable", f"round trip {contact['round_trip_ms']:.1f} ms")


def check_port(facts: Facts, _: Sequence[Facts]) -> Check:
    port = facts.get("port")
    if not facts.get("is_master") or port is None:
        return skipped("port-free", "not the master")
    if not port.get("free"):
        return failed(
            "port-free",
            f"port {port['port']} is in use on the master: {port['error']}",
            "stop the process holding it, or pass another --master-port",
        )
    dropped = port.get("dropped") or []
    if dropped:  # the probe turned them away; a training job's gate would too, but say it
        shown = "; ".join(f"{d['from']} ({d['why']}, x{d['count']})" for d in dropped[:3])
        return warned(
            "port-free",
            f"port {port['port']} free on the master, but connections not from this doctor "
            f"reached it and were dropped: {shown}",
            "another job or a port scanner reaches this port: keep the rendezvous port inside "
            "the cluster's network, or pick another --master-port",
        )
    return passed("port-free", f"port {port['port']} free on the master")


def check_interface(facts: Facts, everyone: Sequence[Facts]) -> Check:
    route = facts.get("route") or {}
    iface, local = route.get("interface"), route.get("local_address") or ""
    if not iface:
        return failed(
            "interface",
            f"no route to the master: {route.get('error')}",
            "check the network configuration and MASTER_ADDR",
        )
    env = facts.get("env") or {}
    wrong = []
    for name, rule in IFNAME_RULES.items():
        if name in env:
            verdict = rule(env[name], iface)
            if not verdict.selected:
                wrong.append(f"{name}={env[name]}: {verdict.reason}")
    setting = env.get("GLOO_SOCKET_IFNAME", "")
    known = facts.get("interfaces")
    absent = [n for n in setting.split(",") if n and known is not None and n not in known]
    if absent and not wrong:  # gloo opens every listed interface: one missing fails init
        wrong.append(f"GLOO_SOCKET_IFNAME={setting}: no interface {', '.join(absent)} here")
    if wrong:
        return failed(
            "interface",
            f"{'; '.join(wrong)}; the master is routed via {iface}",
            f"export NCCL_SOCKET_IFNAME={iface} GLOO_SOCKET_IFNAME={iface}",
        )
    multi_host = len({f.get("host") for f in everyone}) > 1
    if iface in VIRTUAL_IFACES and not local.startswith("127."):
        return failed(
            "interface",
            f"routes to the master via {iface}",
            "set NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME to the cluster interface",
        )
    if iface in VIRTUAL_IFACES and multi_host:
        return warned("interface", f"{iface} ({local}): every node is on this machine (a lab)")
    return passed(
        "interface", f"{iface} ({local}): NCCL_SOCKET_IFNAME={iface} GLOO_SOCKET_IFNAME={iface}"
    )


def check_shared_fs(facts: Facts, _: Sequence[Facts]) -> Check:
    shared = facts.get("shared_fs") or {}
    if shared.get("skipped"):
        return skipped("shared-fs", shared["skipped"])
    if not shared.get("ok"):
        why = shared.get("error") or "different content"
        return failed(
            "shared-fs",
            f"token from node 0 not read at {shared.get('path')}: {why}",
            "put the run directory on a filesystem every node mounts at the same path",
        )
    return passed("shared-fs", f"token read at {shared['path']}")


def check_disk(facts: Facts, _: Sequence[Facts]) -> Check:
    free = int(facts.get("disk_free_bytes", 0))
    text = f"{free / (1 << 30):.1f} GiB free for the run directory"
    if free < CRITICAL_FREE:
        return failed("disk", text, "free space or choose another --run-dir")
    need = disk_room.needed(facts.get("checkpoint_bytes"))
    if free < need:
        return warned(
            "disk", text, f"less than {disk_room.human(need)}: checkpoints may not fit; free space"
        )
    return passed("disk", text)


def check_clock(facts: Facts, _: Sequence[Facts]) -> Check:
    offset = (facts.get("contact") or {}).get("clock_offset_sec")
    if offset is None:
        return skipped("clock-skew", "the master's doctor did not answer")
    text = f"{offset * 1000:+.1f} ms from the master"
    if abs(offset) > SKEW_FAIL:
        return failed("clock-skew", text, "synchronize clocks (chrony/ntp): logs and timeouts")
    if abs(offset) > SKEW_WARN:
        return warned("clock-skew", text, "synchronize clocks (chrony/ntp)")
    return passed("clock-skew", text)


def check_leftovers(facts: Facts, _: Sequence[Facts]) -> Check:
    left = facts.get("leftovers") or {}
    procs, shm, dirs = (
        left.get("processes", []),
        left.get("shm", []),
        left.get("torchelastic_dirs", []),
    )
    if not (procs or shm or dirs):
        return passed("leftovers", "no launcher processes or stale files")
    parts = [
        f"{len(procs)} launcher process(es)" if procs else "",
        f"{len(shm)} /dev/shm segment(s)" if shm else "",
        f"{len(dirs)} torchelastic temp dir(s)" if dirs else "",
    ]
    pids = ", ".join(p.split(":")[0] for p in procs[:5])
    return warned(
        "leftovers",
        "; ".join(p for p in parts if p),
        (f"kill {pids}; " if procs else "") + "remove /dev/shm/torch_* and "
        "/tmp/torchelastic_* of finished runs",
    )


def _reference(values: Sequence[tuple[Facts, Any]]) -> Any:
    """The value most nodes have; on a tie, the master's (node 0's)."""
    counts = Counter(value for _, value in values)
    top = max(counts.values())
    tied = [value for _, value in values if counts[value] == top]
    masters = [value for facts, value in values if facts.get("is_master") and value in tied]
    return (masters or tied)[0]


def _code_items(facts: Facts) -> dict[str, tuple[str | None, str]]:
    """``what -> (hash or None, how to show it)`` for the script and each package."""
    code = facts.get("code") or {}
    items: dict[str, tuple[str | None, str]] = {}
    script = code.get("script")
    if script:
        shown = Path(script["path"]).name
        items["script"] = (script.get("sha256"), f"{shown} {str(script.get('sha256'))[:12]}")
    for name, package in sorted((code.get("packages") or {}).items()):
        digest = package.get("sha256")
        items[name] = (digest, f"{name} {package.get('version')} {str(digest)[:12]}")
    return items


def check_same_code(facts: Facts, everyone: Sequence[Facts]) -> Check:
    """The script, noderun and torch hash alike on every node (seed 001's "same code")."""
    mine = _code_items(facts)
    if not mine:
        return skipped("same-code", "the probe sent no code facts")
    problems, fixes = [], []
    script = (facts.get("code") or {}).get("script") or {}
    for what, (digest, shown) in mine.items():
        if digest is None:
            path = script.get("path") if what == "script" else what
            problems.append(f"{path}: {script.get('error') if what == 'script' else 'missing'}")
            fixes.append(f"put {path} on {facts.get('host')}")
            continue
        values = [(f, _code_items(f).get(what, (None, ""))[0]) for f in everyone]
        expected = _reference([(f, v) for f, v in values if v is not None])
        if digest != expected:
            same = [str(f.get("host")) for f, v in values if v == expected]
            problems.append(f"{shown} differs from {', '.join(same)}'s {str(expected)[:12]}")
            fixes.append(
                f"copy the same {script.get('path')} to {facts.get('host')}"
                if what == "script"
                else f"install the same {what} on {facts.get('host')} as on {same[0]}"
            )
    if problems:
        return failed(
            "same-code",
            "; ".join(problems),
            "; ".join(fixes) + " (rsync or git pull, or one shared filesystem for code and venv)",
        )
    return passed("same-code", ", ".join(shown for _, shown in mine.values()))


def check_paths(facts: Facts, _: Sequence[Facts]) -> Check:
    """Every ``--check-path`` is visible on this node."""
    paths = facts.get("paths") or []
    if not paths:
        return skipped("paths", "no --check-path given")
    missing = [p["path"] for p in paths if not p.get("exists")]
    if missing:
        return failed(
            "paths",
            f"{', '.join(missing)} not found on {facts.get('host')}",
            f"mount or copy {missing[0]} on {facts.get('host')} at the same path as on the "
            "other nodes",
        )
    return passed("paths", ", ".join(f"{p['path']} ({p['kind']})" for p in paths))


NODE_CHECKS: tuple[Callable[[Facts, Sequence[Facts]], Check], ...] = (
    check_versions,
    check_devices,
    check_master_resolves,
    check_master_reachable,
    check_port,
    check_interface,
    check_shared_fs,
    check_disk,
    check_clock,
    check_leftovers,
    check_same_code,
    check_paths,
)


def node_checks(
    probes: Sequence[Facts], expected_hosts: Sequence[str], why: str = ""
) -> list[NodeCheck]:
    """Every check on every node; a node that sent no probe fails as a whole (``why``: how
    the probes' launch went wrong, as its backend named it)."""
    out = []
    seen = {p.get("host") for p in probes}
    for host in expected_hosts:
        if host not in seen and host.split(".")[0] not in seen:
            out.append(
                NodeCheck(
                    host,
                    failed(
                        "probe",
                        f"no answer from this node{f' ({why})' if why else ''}"[:300],
                        "check the node is up: `srun -w NODE hostname`",
                    ),
                )
            )
    order = {h: i for i, h in enumerate(expected_hosts)}
    for facts in sorted(probes, key=lambda f: order.get(str(f.get("host")), len(order))):
        for check in NODE_CHECKS:
            out.append(NodeCheck(str(facts.get("host")), check(facts, probes)))
    return out


def collective_check(result: Facts | None, error: str = "") -> Check:
    if not result:
        return failed(
            "collective",
            f"the all_reduce test did not complete: {error}"[:300],
            "run `noderun explain` on the doctor's logs for the cause",
        )
    sizes = {s["size_bytes"]: s for s in result["all_reduce"]}
    big = sizes[max(sizes)]
    text = (
        f"{result['world_size']} ranks ({result['backend']}): "
        f"{max(sizes) >> 20} MiB all_reduce {big['time_us'] / 1000:.1f} ms, "
        f"busbw {big['busbw_gbps']:.2f} GB/s; 1 KiB {sizes[min(sizes)]['time_us']:.0f} us"
    )
    slow = result.get("slowest_pair")
    if slow:
        a, b = slow["nodes"]
        return warned(
            "collective",
            f"{text}; link {a}<->{b} is slow: "
            f"{slow['bandwidth_bytes_per_sec'] / 1e6:.0f} MB/s vs median "
            f"{slow['median_bytes_per_sec'] / 1e6:.0f} MB/s",
            f"check the cabling/interface between {a} and {b}",
        )
    return passed("collective", text)


def healthy(checks: Sequence[NodeCheck]) -> bool:
    return not any(c.check.status is Status.FAIL for c in checks)
