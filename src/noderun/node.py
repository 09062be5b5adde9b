"""Per-node entrypoint, started by srun: ``python -m noderun.node [options] -- SCRIPT [ARGS…]``.

Reads its node rank and the step's node list from SLURM, derives MASTER_ADDR (first host of
the step) and MASTER_PORT (from the job id), checks both, waits until every node checked in,
then ``os.execv``s into torchrun (torchrun mode) or into the script itself (srun mode, one
task per rank) with RANK/LOCAL_RANK/WORLD_SIZE/LOCAL_WORLD_SIZE/MASTER_ADDR/MASTER_PORT set.
No shell is involved anywhere, so arguments arrive byte for byte.
"""

from __future__ import annotations

import argparse
import dataclasses
import ipaddress
import os
import signal
import socket
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NoReturn

from noderun import timeline
from noderun.backends.slurm import hostnames
from noderun.errors import NoderunError, TopologyError, UsageError
from noderun.node_gate import NodeGate
from noderun.plan.launch import Entry, rank_command, torchrun_argv
from noderun.plan.slurm import DEFAULT_JOIN_TIMEOUT, LaunchMode
from noderun.topology import in_slurm_step, port_for_job, tasks_per_node

SRUN_HINT = "srun --nodes=N --ntasks-per-node=1 python -m noderun.node … -- SCRIPT"


@dataclasses.dataclass(frozen=True)
class NodeSpec:
    """Where this task sits: resolved from explicit options first, then the srun step."""

    mode: LaunchMode
    index: int  # participant in the check-in: node rank (torchrun) or global rank (srun)
    node_rank: int
    nnodes: int
    nproc_per_node: int
    hosts: tuple[str, ...]
    master_addr: str
    master_port: int
    run_dir: Path
    job_id: str
    join_timeout: float
    local_rank: int = 0
    entry: Entry = Entry.SCRIPT
    run_id: str = ""

    @property
    def world_size(self) -> int:
        return self.nnodes * self.nproc_per_node

    def describe(self, index: int) -> str:
        """``node 1 (node2, ranks 2-3)`` in torchrun mode, ``rank 3 (node2)`` in srun mode."""
        nproc = self.nproc_per_node
        if self.mode is LaunchMode.TORCHRUN:
            first, last = index * nproc, index * nproc + nproc - 1
            ranks = f"rank {first}" if first == last else f"ranks {first}-{last}"
            return f"node {index} ({self._host(index)}, {ranks})"
        return f"rank {index} ({self._host(index // nproc)})"

    def _host(self, node: int) -> str:
        return self.hosts[node] if node < len(self.hosts) else "host unknown"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m noderun.node", description=__doc__)
    parser.add_argument("--mode", type=LaunchMode, choices=list(LaunchMode), default="torchrun")
    parser.add_argument("--nproc-per-node", type=int, required=True)
    parser.add_argument("--nnodes", type=int, help="default: the step's node count")
    parser.add_argument("--node-rank", type=int, help="default: SLURM_NODEID")
    parser.add_argument("--master-addr", help="default: first host of the step")
    parser.add_argument("--master-port", type=int, help="default: derived from the job id")
    parser.add_argument("--run-dir", type=Path, default=Path("."))
    parser.add_argument("--join-timeout", type=float, default=DEFAULT_JOIN_TIMEOUT)
    parser.add_argument("--run-id", help="TORCHELASTIC_RUN_ID (default: the job id)")
    entry = parser.add_mutually_exclusive_group()
    entry.add_argument("-m", "--module", action="store_true", help="SCRIPT is a module")
    entry.add_argument("--no-python", action="store_true", help="SCRIPT is an executable")
    return parser


def split_command(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """``[opts…, '--', script, args…]`` -> (opts, [script, args…]); the script part is untouched."""
    if "--" not in argv:
        raise UsageError("no script given to noderun.node", f"usage: {SRUN_HINT} [ARGS…]")
    cut = list(argv).index("--")
    command = list(argv[cut + 1 :])
    if not command:
        raise UsageError("no script given to noderun.node", f"usage: {SRUN_HINT} [ARGS…]")
    return list(argv[:cut]), command


def _int(environ: Mapping[str, str], *names: str) -> int | None:
    for name in names:
        if environ.get(name, "").strip().isdigit():
            return int(environ[name])
    return None


def resolve(opts: argparse.Namespace, environ: Mapping[str, str]) -> NodeSpec:
    """Explicit options win; otherwise the srun step's variables. Raises with a hint."""
    in_step = in_slurm_step(environ)
    explicit = opts.node_rank is not None and opts.nnodes is not None and opts.master_addr
    if not in_step and not explicit:
        raise UsageError(
            "python -m noderun.node is not running inside an srun step",
            f"start it on every node with `{SRUN_HINT}` (or pass --node-rank, --nnodes and "
            "--master-addr)",
        )
    mode = LaunchMode(opts.mode)
    hosts = tuple(hostnames(environ.get("SLURM_STEP_NODELIST", "")))
    node_rank = opts.node_rank if opts.node_rank is not None else _int(environ, "SLURM_NODEID")
    nnodes = opts.nnodes or _int(environ, "SLURM_STEP_NUM_NODES", "SLURM_NNODES") or len(hosts)
    if nnodes > len(hosts):  # hosts of nodes outside this step, for messages only
        job_hosts = tuple(hostnames(environ.get("SLURM_JOB_NODELIST", "")))
        hosts = hosts + tuple(h for h in job_hosts if h not in hosts)
    if node_rank is None or not 0 <= node_rank < nnodes:
        raise TopologyError(
            f"node rank {node_rank} is not in 0..{nnodes - 1}", "check --node-rank/--nnodes"
        )
    per_node = tasks_per_node(environ.get("SLURM_STEP_TASKS_PER_NODE", "") or "1")
    here = per_node[node_rank] if node_rank < len(per_node) else per_node[0]
    expected = 1 if mode is LaunchMode.TORCHRUN else opts.nproc_per_node
    if in_step and here != expected:
        raise UsageError(
            f"{here} noderun.node task(s) on {hosts[node_rank] if hosts else 'this node'} but "
            f"{mode.value} mode needs {expected} per node",
            f"srun --ntasks-per-node={expected} (`noderun run`/`noderun submit` set this up)",
        )
    job_id = environ.get("SLURM_JOB_ID", "")
    port = opts.master_port or _int(environ, "NODERUN_MASTER_PORT")
    if port is None:
        if not job_id:
            raise UsageError("no SLURM_JOB_ID to derive MASTER_PORT from", "pass --master-port")
        port = port_for_job(job_id)
    master_addr = opts.master_addr or (hosts[0] if hosts else "")
    if not master_addr:
        raise TopologyError("the step's node list is empty", "pass --master-addr")
    local_rank = _int(environ, "SLURM_LOCALID") or 0
    rank = _int(environ, "SLURM_PROCID") or 0
    return NodeSpec(
        mode=mode,
        index=node_rank if mode is LaunchMode.TORCHRUN else rank,
        node_rank=node_rank,
        nnodes=nnodes,
        nproc_per_node=opts.nproc_per_node,
        hosts=hosts,
        master_addr=master_addr,
        master_port=port,
        run_dir=opts.run_dir.resolve(),
        job_id=job_id,
        join_timeout=opts.join_timeout,
        local_rank=local_rank,
        entry=Entry.MODULE if opts.module else Entry.EXECUTABLE if opts.no_python else Entry.SCRIPT,
        run_id=opts.run_id or job_id or opts.run_dir.resolve().name,
    )


def _addresses(name: str) -> set[str]:
    try:
        return {str(info[4][0]) for info in socket.getaddrinfo(name, None, socket.AF_INET)}
    except OSError:
        return set()


def check_master(spec: NodeSpec, this_host: str) -> None:
    """MASTER_ADDR must resolve everywhere, and be an address of node 0 on node 0."""
    found = _addresses(spec.master_addr)
    if not found:
        raise TopologyError(
            f"MASTER_ADDR {spec.master_addr!r} does not resolve on {this_host}",
            "use a hostname every node can resolve (the first host of the step is the default)",
        )
    if spec.node_rank != 0:
        return
    mine = set().union(*(_addresses(n) for n in {this_host, socket.gethostname()}))
    if not found & mine:  # the interfaces' own addresses, only when the names did not match
        import psutil  # only node 0 pays for it, and rarely

        mine |= {a.address for nic in psutil.net_if_addrs().values() for a in nic}
    if not found & mine and not all(ipaddress.ip_address(a).is_unspecified for a in found):
        raise TopologyError(
            f"MASTER_ADDR {spec.master_addr} ({', '.join(sorted(found))}) is not an address of "
            f"node 0 ({this_host}), where the rendezvous listens",
            "leave MASTER_ADDR to noderun (the first host of the step) or point it at node 0",
        )


def exec_argv(spec: NodeSpec, command: list[str], python: str) -> list[str]:
    """The argv that replaces this process: torchrun (one per node) or the script (per rank)."""
    script, args = command[0], command[1:]
    if spec.mode is LaunchMode.SRUN:
        return [python, *rank_command(script, args, spec.entry)]
    argv = torchrun_argv(
        nnodes=spec.nnodes,
        nproc_per_node=spec.nproc_per_node,
        node_rank=spec.node_rank,
        master_addr=spec.master_addr,
        master_port=spec.master_port,
        run_id=spec.run_id,
        log_dir=spec.run_dir / "logs" / "torchelastic" / f"node{spec.node_rank}",
        script=script,
        script_args=args,
        python=python,
        entry=spec.entry,
    )
    # the static rendezvous would otherwise wait 600 s for an agent that died after check-in
    cut = len(argv) - len(command) - 1 - len(spec.entry.flags())  # before the rank entry
    return [*argv[:cut], f"--rdzv-conf=timeout={spec.join_timeout:g}", *argv[cut:]]


def exec_env(spec: NodeSpec, environ: Mapping[str, str]) -> dict[str, str]:
    """The rank contract: the same variables in both modes, plus noderun's own."""
    env = dict(environ)
    env.update(
        MASTER_ADDR=spec.master_addr,
        MASTER_PORT=str(spec.master_port),
        NODERUN_RUN_DIR=str(spec.run_dir),
        NODERUN_NODE_RANK=str(spec.node_rank),
        NODERUN_JOIN_TIMEOUT=f"{spec.join_timeout:g}",
        PYTHONUNBUFFERED="1",
    )
    if spec.mode is LaunchMode.SRUN:
        env.update(
            RANK=str(spec.index),
            LOCAL_RANK=str(spec.local_rank),
            WORLD_SIZE=str(spec.world_size),
            LOCAL_WORLD_SIZE=str(spec.nproc_per_node),
            NODE_RANK=str(spec.node_rank),
            GROUP_RANK=str(spec.node_rank),
            # what torchrun's agent also sets (not TORCHELASTIC_RUN_ID: no agent runs here)
            ROLE_RANK=str(spec.index),
            ROLE_NAME="default",
            ROLE_WORLD_SIZE=str(spec.world_size),
            GROUP_WORLD_SIZE=str(spec.nnodes),
        )
    return env


def _fail(err: NoderunError) -> NoReturn:
    # one write per line: several tasks share srun's output
    os.write(2, f"noderun.node: error: {err}\n".encode())
    raise SystemExit(err.exit_code)


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> NoReturn:
    env = os.environ if environ is None else environ
    try:
        options, command = split_command(sys.argv[1:] if argv is None else argv)
        parser = _parser()
        spec = resolve(parser.parse_args(options), env)
        timeline.stamp(spec.run_dir, "node_entered", f"node{spec.index}")
        this_host = env.get("SLURMD_NODENAME") or socket.gethostname()
        check_master(spec, this_host)
        gate = NodeGate(
            index=spec.index,
            total=spec.nnodes if spec.mode is LaunchMode.TORCHRUN else spec.world_size,
            addr=spec.master_addr,
            port=spec.master_port,
            host=this_host,
            join_timeout=spec.join_timeout,
            describe=spec.describe,
            noun="nodes" if spec.mode is LaunchMode.TORCHRUN else "ranks",
            by_hand=not in_slurm_step(env),
        )
        gate.wait()
        timeline.stamp(spec.run_dir, "gate_passed", f"node{spec.index}")
    except NoderunError as err:
        _fail(err)
    new_argv = exec_argv(spec, command, sys.executable)
    # sbatch --signal=USR1@T reaches every process of the step: torchrun's agent (and a script
    # without a handler) would die of it; ranks that install a handler still receive it
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    if spec.mode is LaunchMode.SRUN and environ is None:
        # one Python start-up per rank, not two: this process becomes the rank, as the
        # rank entry would run it after an exec (nothing of torch is imported yet)
        from noderun import rank_entry

        os.environ.update(exec_env(spec, {}))
        rank_entry.main(new_argv[2:], in_process=True)
    os.execve(new_argv[0], new_argv, exec_env(spec, env))


if __name__ == "__main__":
    main()
