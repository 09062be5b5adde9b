"""From ranked findings and signs of health to a verdict: the failure and its cause, or
"no failure found" with what the logs show; warnings are reported as warnings."""

from __future__ import annotations

import dataclasses
import ipaddress
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from noderun.explain.findings import Evidence, Finding, Ranker
from noderun.explain.scanner import Hit
from noderun.explain.signatures import _IFACE_FIX, CAUSES, SIGNS, Tier
from noderun.explain.sources import Sources

# what makes a job run into its time limit: when one of these was seen, it is the cause and
# the time limit its consequence
_HANGS = frozenset(
    {
        "missing-launcher",
        "stalled-rank",
        "collective-deadlock",
        "collective-timeout",
        "rendezvous-timeout",
        "port-in-use",
        "connection-refused",
    }
)
# c10d's store client giving up (socket.cpp throwTimeoutError; TCPStore before torch 1.11), and
# its retries of a connect that timed out: the address never answered (socket.cpp)
_STORE_TIMEOUT = re.compile(
    r"client socket has timed out after \S+ while trying to connect|connect\(\) timed out\."
)
# c10d's summary after every address failed (socket.cpp), and an attempt's own reason
_CONNECT_SUMMARY = re.compile(r"failed to connect to any network address of \(")
_ERRNO = re.compile(r"\(errno: \d+ - ")
_NO_ANSWER = re.compile(r"server socket on \S+ has timed out, will retry|\(errno: 110 - ")
# the address c10d's store client tried: "(HOST, PORT)" (socket.cpp) or "HOST:PORT"
_STORE_TARGET = re.compile(
    r"while trying to connect to \(?(?:\[([^\]\s]+)\]|([^\s,()\[\]]+?)(?:[,)]|:\d|$))"
)
# addresses no other host routes to: link-local ones (RFC 3927, RFC 4291: never forwarded by a
# router) and Docker's default bridge network (docker0, 172.17.0.0/16 unless `bip` is set: a
# container's address there is private to its host; NCCL leaves docker* interfaces out of its
# default NCCL_SOCKET_IFNAME for that reason)
_DOCKER_BRIDGE = ipaddress.ip_network("172.17.0.0/16")
# the peer gloo connected to (transport/tcp/pair.cc "remote=[ADDR]:PORT", older "connect
# [ADDR]:PORT"), and torch's warning that it bound loopback (ProcessGroupGloo.cpp)
_GLOO_PEER = re.compile(r"(?:remote=|\bconnect )\[([^\]\s]+)\]")
_GLOO_FALLBACK = re.compile(r"Unable to resolve hostname to a \(local\) address")
_MISMATCH_FIX = "install the same NCCL (the same torch build) on every node (`noderun doctor`)"


@dataclasses.dataclass(frozen=True)
class Seen:
    """A sign of health: what it shows, its first line, how often."""

    what: str
    evidence: Evidence
    occurrences: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "what": self.what,
            "evidence": dataclasses.asdict(self.evidence),
            "occurrences": self.occurrences,
        }


@dataclasses.dataclass
class Verdict:
    """``failures`` (root cause first) when the run failed; warnings and signs either way."""

    failures: list[Finding]
    warnings: list[Finding]
    seen: list[Seen]
    finished: bool
    attempts: list[str] = dataclasses.field(default_factory=list)  # restarted runs: each one
    failed_rank: str | None = None  # the launcher's record: rank, node, host, reason
    # an unclassified failure: each log's last non-empty line (file, line, text)
    last_lines: list[Evidence] = dataclasses.field(default_factory=list)

    @property
    def failed(self) -> bool:
        return bool(self.failures)

    @property
    def unclassified(self) -> bool:
        """A failure no known cause fits: its evidence is the first error-level line."""
        return bool(self.failures) and self.failures[0].cause == "unknown"

    def to_dict(self) -> dict[str, Any]:
        return {
            "verdict": "failed" if self.failed else "no failure found",
            "finished": self.finished,
            "findings": [f.to_dict() for f in self.failures],
            "warnings": [f.to_dict() for f in self.warnings],
            "seen": [s.to_dict() for s in self.seen],
            "attempts": self.attempts,
            "failed_rank": self.failed_rank,
            "unclassified": self.unclassified,
            "last_lines": [dataclasses.asdict(e) for e in self.last_lines],
        }


def judge(
    ranker: Ranker, sources: Sources, last_lines: Mapping[Path, tuple[int, str]] | None = None
) -> Verdict:
    """Weigh what was found: refuted findings go, a finished run has only warnings. An
    unclassified failure also gets each log's last line (``last_lines``, per file)."""
    signs = {kind for kind, _ in ranker.signs}
    ranked = [f for f in ranker.findings() if not (f.refuted_by and f.refuted_by in signs)]
    warnings = [f for f in ranked if f.tier is Tier.WARNING]
    problems = [f for f in ranked if f.tier is not Tier.WARNING]
    mismatch = _nccl_mismatch(ranker)
    finished = (
        ("finished" in signs or bool(sources.succeeded))
        and not ranker.run_failed(signs)
        and not sources.failures
    )
    if finished:  # the run ended well: whatever else was printed did not stop it
        return Verdict(
            [],
            [*([mismatch] if mismatch else []), *problems, *warnings],
            _seen(ranker, sources),
            True,
            sources.attempts,
        )
    if any(f.tier is not Tier.LAST_RESORT for f in problems):
        problems = [f for f in problems if f.tier is not Tier.LAST_RESORT]
    if any(not f.alone and f.tier is not Tier.LAST_RESORT for f in problems):
        problems = [f for f in problems if not f.alone]
    if problems and problems[0].cause in ("time-limit", "interrupted"):
        hang = next((f for f in problems if f.cause in _HANGS), None)
        if hang is not None:  # it hung, then ran out of time or someone stopped it
            problems = [hang, *(f for f in problems if f is not hang)]
    problems = _never_answered(ranked, problems)
    problems = _connect_reason(ranked, problems)
    problems = _host_local_master(problems)
    problems = _gloo_on_loopback(problems, warnings)
    if mismatch:  # ranks of one job on different NCCL versions: a failure waiting to happen
        problems.insert(0, mismatch)
    problems = [g for g in (_fewer_ranks(ranker, f) for f in problems) if g is not None]
    problems = [_config_file(ranker, f) for f in problems]
    exit_failure = _after_the_work(ranker, problems)
    if exit_failure is not None:
        problems.insert(0, exit_failure)
    if sources.known:  # what the run's records prove comes before what the logs suggest
        proven = {f.cause for f in sources.known} | {"rank-crashed"}
        problems = [*sources.known, *(f for f in problems if f.cause not in proven)]
    if not problems and sources.failures:
        problems = [_unexplained(*sources.failures[0])]
    verdict = Verdict(
        problems, warnings, _seen(ranker, sources), False, sources.attempts, sources.failed_rank
    )
    if verdict.unclassified and last_lines:
        verdict.last_lines = [
            Evidence(str(path), *last_lines[path]) for path in sources.files if path in last_lines
        ]
    return verdict


def _never_answered(ranked: list[Finding], problems: list[Finding]) -> list[Finding]:
    """c10d's store client gave up after its whole timeout (a master that came late, by
    itself): when its retries said the address never answered a connection (connect timed
    out), the address was wrong or unreachable, and that retry line is the cause."""
    if not problems or problems[0].cause != "rendezvous-timeout":
        return problems
    if not _STORE_TIMEOUT.search(problems[0].evidence.text):
        return problems
    retry = next(
        (
            f
            for f in ranked
            if f.cause == "connection-refused" and _NO_ANSWER.search(f.evidence.text)
        ),
        None,
    )
    if retry is None:
        return problems
    return [dataclasses.replace(retry, tier=Tier.ROOT), *problems]


def _connect_reason(ranked: list[Finding], problems: list[Finding]) -> list[Finding]:
    """c10d's store client logs each address it tried with its errno at warning level
    ("[W socket.cpp] The client socket has failed to connect to ADDR (errno: 110 - …)"),
    then gives up with a summary that names no reason ("[E socket.cpp] … failed to connect to
    any network address of (HOST, PORT)."): the attempt's line says why, and is the evidence."""
    if not problems or problems[0].cause != "connection-refused":
        return problems
    root = problems[0]
    if not _CONNECT_SUMMARY.search(root.evidence.text) or _ERRNO.search(root.evidence.text):
        return problems
    attempt = next(
        (
            f
            for f in ranked
            if f.cause == "connection-refused"
            and f.evidence.file == root.evidence.file
            and _ERRNO.search(f.evidence.text)
        ),
        None,
    )
    if attempt is None:
        return problems
    return [dataclasses.replace(root, evidence=attempt.evidence), *problems[1:]]


def host_local(address: str) -> bool:
    """An IP address that only its own host can reach (link-local, Docker's default bridge);
    False for host names and for anything else."""
    try:
        ip = ipaddress.ip_address(address.split("%")[0])
    except ValueError:
        return False
    return ip.is_link_local or ip in _DOCKER_BRIDGE


def _host_local_master(problems: list[Finding]) -> list[Finding]:
    """c10d's store client gave up on an address that only its own host can reach: the ranks
    were told a container's or a link-local address (the interface the master picked, or a
    MASTER_ADDR taken inside a container) that the other nodes cannot route to; no master,
    however late, would have answered there."""
    if not problems or problems[0].cause != "rendezvous-timeout":
        return problems
    found = _STORE_TARGET.search(problems[0].evidence.text)
    if found is None or not _STORE_TIMEOUT.search(problems[0].evidence.text):
        return problems
    address = found.group(1) or found.group(2)
    if not host_local(address):
        return problems
    root = dataclasses.replace(
        problems[0],
        cause="network-unreachable",
        summary=f"the ranks were told to reach the master at {address}, an address only "
        "its own host can reach (a Docker bridge or link-local address): the other nodes "
        "cannot route to it",
        fix="give the master an address on the network between the nodes (MASTER_ADDR, the "
        "launcher's node IP; run containers with --network=host); " + _IFACE_FIX,
    )
    return [root, *problems[1:]]


def _gloo_on_loopback(problems: list[Finding], warnings: list[Finding]) -> list[Finding]:
    """Gloo's ranks failed to connect to a peer that bound a loopback address (127.0.0.0/8,
    ::1: its hostname resolves there, as Ubuntu's 127.0.1.1 does, or to nothing): from
    another node that address is the caller's own host. torch's fallback warning, when
    printed, is the reason and the better evidence."""
    if not problems or problems[0].cause != "network-unreachable":
        return problems
    found = _GLOO_PEER.search(problems[0].evidence.text)
    if found is None or not _loopback(found.group(1)):
        return problems
    fallback = next((w for w in warnings if _GLOO_FALLBACK.search(w.evidence.text)), None)
    root = dataclasses.replace(
        problems[0],
        summary=f"Gloo's ranks dialled {found.group(1)}: a peer bound the loopback address "
        "(its hostname resolves to no address the other nodes reach), so each node reached "
        "only itself",
        fix="set GLOO_SOCKET_IFNAME to the interface between the nodes on every node, or make "
        "each node's hostname resolve to that interface's address (/etc/hosts maps it to "
        "127.0.x.x)",
        evidence=fallback.evidence if fallback is not None else problems[0].evidence,
    )
    return [root, *problems[1:]]


def _loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return address == "localhost"


def _config_file(ranker: Ranker, finding: Finding) -> Finding:
    """A graph or topology file NCCL read from the environment is the better evidence of a
    configuration that does not fit the node than the error it led to."""
    hit = next((h for (kind, _), (h, _) in ranker.signs.items() if kind == "nccl-file"), None)
    if finding.cause != "nccl-config" or hit is None:
        return finding
    return dataclasses.replace(finding, evidence=Evidence(str(hit.path), hit.line, hit.text))


def _fewer_ranks(ranker: Ranker, finding: Finding) -> Finding | None:
    """Lightning's ``MEMBER: 1/N`` means "all ranks think they are 0" only when no other rank
    announced itself; when others did, fewer ranks were started than the Trainer expects,
    and when all N did, the finding is moot (None)."""
    members = sorted({int(v) for (kind, v), _ in ranker.signs.items() if kind == "member"})
    if finding.cause != "missing-launcher" or "MEMBER: 1/" not in finding.evidence.text:
        return finding
    if not members or finding.occurrences > 1:  # rank 0 claimed more than once: duplicates
        return finding
    expected = finding.evidence.text.split("MEMBER: 1/")[1].split()[0].strip(",")
    if expected.isdigit() and set(range(1, int(expected))) <= set(members):
        return None  # every rank of the N announced itself
    return dataclasses.replace(
        finding,
        cause="rendezvous-timeout",
        summary=f"ranks 0 and {', '.join(map(str, members[:8]))} started, but the Trainer "
        f"expects {expected}: fewer processes were launched than num_nodes x devices",
        fix="make the launch match the Trainer: nodes x processes per node (--nnodes, "
        "--nproc-per-node) == Trainer(num_nodes=…) x devices",
    )


def _after_the_work(ranker: Ranker, problems: list[Finding]) -> Finding | None:
    """The work finished (a sign of it was printed) and every failure came after it: the run
    died at exit (teardown: a watchdog, a segfault, an abort), not while it worked."""
    finished = next(
        (hit for (kind, _), (hit, _) in ranker.signs.items() if kind == "finished"), None
    )
    if finished is None or not problems or problems[0].cause == "finalization-abort":
        return None
    if not all(_later(finished, f) for f in problems):
        return None
    root = problems[0]
    return Finding(
        cause="finalization-abort",
        summary=f"the work finished, then the run failed at exit: {root.summary}",
        fix="the results are complete; end the process group before exit "
        "(destroy_process_group()) and look at the teardown of the evidence line's rank",
        evidence=root.evidence,
        tier=Tier.ROOT,
        time=root.time,
    )


def _later(sign: Hit, finding: Finding) -> bool:
    if sign.time is not None and finding.time is not None:
        return finding.time >= math.floor(sign.time)
    return finding.evidence.file == str(sign.path) and finding.evidence.line > sign.line


def _nccl_mismatch(ranker: Ranker) -> Finding | None:
    versions = [
        (value, hit) for (kind, value), (hit, _) in ranker.signs.items() if kind == "nccl-version"
    ]
    if len({value for value, _ in versions}) < 2:
        return None
    # the odd one out: the version fewest nodes run; on a tie the older one (a node an
    # upgrade left behind)
    counts = {v: n for (kind, v), (_, n) in ranker.signs.items() if kind == "nccl-version"}
    _, hit = min(versions, key=lambda vh: (counts[vh[0]], _version_key(vh[0])))
    return Finding(
        cause="version-mismatch",
        summary=f"nodes run different NCCL versions: {', '.join(v for v, _ in versions)}",
        fix=_MISMATCH_FIX,
        evidence=Evidence(str(hit.path), hit.line, hit.text),
        tier=Tier.ROOT,
        time=hit.time,
        occurrences=len(versions),
    )


def _version_key(version: str) -> tuple[int, ...]:
    """``2.14.3+cuda11.7`` -> (2, 14, 3): NCCL's own numbering, for ordering."""
    return tuple(int(part) for part in re.findall(r"\d+", version.split("+")[0])[:3])


def _unexplained(where: str, text: str) -> Finding:
    return Finding(
        cause="unknown",
        summary=f"{CAUSES['unknown']}; the logs hold no error-level line",
        fix="read each log's last line (below) and the failing rank's log before it",
        evidence=Evidence(where, 0, text),
        tier=Tier.LAST_RESORT,
        time=None,
    )


def _seen(ranker: Ranker, sources: Sources) -> list[Seen]:
    seen = [
        Seen(
            f"{SIGNS[kind]}{f' ({value})' if value else ''}",
            Evidence(str(hit.path), hit.line, hit.text),
            count,
        )
        for (kind, value), (hit, count) in ranker.signs.items()
    ]
    seen += [Seen(text, Evidence(where, 0, text), 1) for where, text in sources.succeeded]
    return seen
