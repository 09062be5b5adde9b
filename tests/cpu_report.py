"""Where the suite's CPU went: ``make test-cpu`` runs the lanes with a per-test CPU log and (as
root, with Debian's ``acct``) the kernel's process accounting, then prints this report.

The suite's budget is CPU on 2 cores (both are busy for the whole of ``make test-lanes``), and
much of it is spent outside pytest's process tree: a Slurm job's processes are children of
``slurmstepd``, an SSH host's of ``sshd``; ``--durations`` (wall, inflated by the other lanes)
and the per-test log (pytest's own children only) miss them. Process accounting records every
process that ended, with its CPU time, its parent and its command name, wherever it ran.

    python tests/cpu_report.py DIR      # DIR/tests.tsv (NODERUN_TEST_CPU_LOG), DIR/pacct

Standard library only; the accounting file is read with ``dump-acct`` (Debian's ``acct``).
"""

from __future__ import annotations

import argparse
import collections
import shutil
import subprocess
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

HEAVY = 1.0  # CPU-s: a process above this imported torch (``import torch`` alone is ~1.2-1.5)
ROOTS = ("slurmstepd", "sshd", "pytest")  # whose tree a process ran in: Slurm job, SSH host, local


@dataclass(frozen=True)
class Proc:
    comm: str  # the command name at exit (a torch process often shows a thread's: pt_elastic)
    cpu: float  # user + system seconds
    elapsed: float
    pid: int
    ppid: int


def parse_dump(lines: Iterable[str]) -> list[Proc]:
    """``dump-acct`` lines (``comm|v3|utime|stime|etime|uid|gid|mem|io|pid|ppid|…``, times in
    clock ticks of 1/100 s); lines of another shape are skipped."""
    procs = []
    for line in lines:
        fields = [field.strip() for field in line.split("|")]
        if len(fields) < 11:
            continue
        try:
            utime, stime, etime = (float(v) for v in fields[2:5])
            pid, ppid = int(fields[9]), int(fields[10])
        except ValueError:
            continue
        procs.append(Proc(fields[0], (utime + stime) / 100, etime / 100, pid, ppid))
    return procs


def tree_of(proc: Proc, by_pid: dict[int, Proc]) -> str:
    """The nearest ancestor among ROOTS (a reused pid can mislead it: "other" then)."""
    seen: set[int] = set()
    current: Proc | None = proc
    while current is not None and current.pid not in seen:
        if current.comm in ROOTS:
            return current.comm
        seen.add(current.pid)
        current = by_pid.get(current.ppid)
    return "other"


def process_report(procs: Sequence[Proc]) -> list[str]:
    by_pid = {p.pid: p for p in procs}
    total = sum(p.cpu for p in procs)
    where: dict[str, float] = collections.defaultdict(float)
    for proc in procs:
        where[tree_of(proc, by_pid)] += proc.cpu
    heavy = [p for p in procs if p.cpu >= HEAVY]
    parents = {p.ppid for p in heavy}
    agents = [p for p in heavy if p.pid in parents]  # started torch processes: agents, templates
    names = {"slurmstepd": "Slurm jobs", "sshd": "SSH hosts", "pytest": "local (pytest)"}
    out = [f"processes: {len(procs)}, CPU {total:.0f} s"]
    out += [f"  {names.get(k, k):16s} {v:7.0f} s  {v / max(total, 1e-9):4.0%}"
            for k, v in sorted(where.items(), key=lambda kv: -kv[1])]  # fmt: skip
    out.append(
        f"  torch processes (>= {HEAVY:g} CPU-s): {len(heavy)}, {sum(p.cpu for p in heavy):.0f} s;"
        f" of them agents/launchers: {len(agents)}, {sum(p.cpu for p in agents):.0f} s"
    )
    return out


def per_test_report(lines: Iterable[str], top: int = 25) -> list[str]:
    """NODERUN_TEST_CPU_LOG lines (``cpu<TAB>wall<TAB>nodeid``): the costliest tests and files."""
    tests: list[tuple[float, float, str]] = []
    for line in lines:
        cpu, wall, node = ([*line.rstrip("\n").split("\t"), "", ""])[:3]
        try:
            tests.append((float(cpu), float(wall), node))
        except ValueError:
            continue
    files: dict[str, float] = collections.defaultdict(float)
    for spent, _, nodeid in tests:
        files[nodeid.split("::")[0]] += spent
    out = [f"tests: {len(tests)}, CPU {sum(t[0] for t in tests):.0f} s in pytest's own trees"]
    out += [f"  {cpu:6.1f} s cpu {wall:6.1f} s wall  {node}" for cpu, wall, node in
            sorted(tests, reverse=True)[:top]]  # fmt: skip
    out.append("by file:")
    ranked = sorted(files.items(), key=lambda kv: -kv[1])[:top]
    out += [f"  {spent:6.1f} s  {name}" for name, spent in ranked]
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python tests/cpu_report.py")
    parser.add_argument("dir", type=Path, help="holds tests.tsv and (optionally) pacct")
    opts = parser.parse_args(argv)
    log, pacct = opts.dir / "tests.tsv", opts.dir / "pacct"
    if not log.is_file():
        print(f"cpu_report: {log} is missing: run `make test-cpu`", file=sys.stderr)
        return 2
    print("\n".join(per_test_report(log.read_text().splitlines())))
    if pacct.is_file() and pacct.stat().st_size and shutil.which("dump-acct"):
        dump = subprocess.run(["dump-acct", str(pacct)], capture_output=True, text=True)
        print("\n".join(process_report(parse_dump(dump.stdout.splitlines()))))
    else:
        print("(no process accounting: as root, `apt-get install acct` for the Slurm and SSH part)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
