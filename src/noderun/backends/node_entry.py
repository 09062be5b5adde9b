"""Per-node entrypoint, started by srun: ``python -m noderun.node [options] -- SCRIPT [ARGS…]``.

Resolves where this task sits (``NodeSpec.from_env``, with the step's hosts expanded by
``scontrol``), checks MASTER_ADDR (DNS, node 0's own addresses), waits until every node checked
in (``NodeGate``), then ``os.execv``s into torchrun (torchrun mode) or into the script itself
(srun mode, one task per rank) with RANK/LOCAL_RANK/WORLD_SIZE/LOCAL_WORLD_SIZE/MASTER_ADDR/
MASTER_PORT and the rank contract set. No shell is involved anywhere, so arguments arrive byte
for byte.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NoReturn

from noderun import proc_guard, timeline
from noderun.backends import addresses, store_host
from noderun.backends.node_gate import NodeGate, listen
from noderun.backends.slurm import hostnames
from noderun.errors import NoderunError, TopologyError, UsageError
from noderun.plan.launch import Entry, Gang, rank_command
from noderun.plan.slurm import DEFAULT_JOIN_TIMEOUT
from noderun.topology import in_slurm_step
from noderun.topology.contract import RankContract
from noderun.topology.node_spec import SRUN_HINT, LaunchMode, NodeSpec


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
    parser.add_argument(
        "--torchrun-flag", action="append", default=[], help="a torchrun agent option, as given"
    )
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


def entry_of(opts: argparse.Namespace) -> Entry:
    return Entry.MODULE if opts.module else Entry.EXECUTABLE if opts.no_python else Entry.SCRIPT


def resolve(opts: argparse.Namespace, environ: Mapping[str, str]) -> NodeSpec:
    """The spec from the parsed options and the step; the step's hosts expanded by scontrol."""
    nodelist = environ.get("SLURM_STEP_NODELIST", "")
    return NodeSpec.from_env(
        environ,
        mode=LaunchMode(opts.mode),
        nproc_per_node=opts.nproc_per_node,
        run_dir=opts.run_dir.resolve(),
        join_timeout=opts.join_timeout,
        nnodes=opts.nnodes,
        node_rank=opts.node_rank,
        master_addr=opts.master_addr,
        master_port=opts.master_port,
        run_id=opts.run_id,
        hosts=hostnames(nodelist) if nodelist else (),
    )


def check_master(spec: NodeSpec, this_host: str) -> None:
    """MASTER_ADDR must resolve everywhere, and be an address of node 0 on node 0 (names and
    addresses compared as addresses, IPv4 and IPv6)."""
    found = addresses.addresses(spec.master_addr)
    if not found:
        raise TopologyError(
            f"MASTER_ADDR {spec.master_addr!r} does not resolve on {this_host}",
            "use a hostname every node can resolve (the first host of the step is the default)",
        )
    if spec.node_rank != 0 or all(a.is_unspecified for a in found):
        return
    mine = addresses.addresses(this_host) | addresses.addresses(socket.gethostname())
    if not found & mine and not found & addresses.this_machine():  # interfaces: rarely asked
        raise TopologyError(
            f"MASTER_ADDR {spec.master_addr} ({addresses.shown(found)}) is not an address of "
            f"node 0 ({this_host}), where the rendezvous listens",
            "leave MASTER_ADDR to noderun (the first host of the step) or point it at node 0",
        )


def exec_argv(
    spec: NodeSpec,
    command: list[str],
    python: str,
    entry: Entry = Entry.SCRIPT,
    agent_flags: Sequence[str] = (),
) -> list[str]:
    """The argv that replaces this process: torchrun (one per node) or the script (per rank)."""
    script, args = command[0], command[1:]
    if spec.mode is LaunchMode.SRUN:
        return [python, *rank_command(script, args, entry)]
    gang = Gang(
        nnodes=spec.nnodes,
        nproc_per_node=spec.nproc_per_node,
        master_addr=spec.master_addr,
        master_port=spec.master_port,
        run_dir=spec.run_dir,
        script=script,
        script_args=tuple(args),
        run_id=spec.run_id,
        python=python,
        entry=entry,
        agent_flags=tuple(agent_flags),
    )
    argv = gang.agent_argv(spec.node_rank)
    # the static rendezvous would otherwise wait 600 s for an agent that died after check-in
    cut = len(argv) - len(command) - 1 - len(entry.flags())  # before the rank entry
    return [*argv[:cut], f"--rdzv-conf=timeout={spec.join_timeout:g}", *argv[cut:]]


AGENT_STORE_SWITCH = "NODERUN_AGENT_STORE"  # "0": rank 0's init_process_group hosts the store


def hosts_store(spec: NodeSpec, environ: Mapping[str, str], entry: Entry = Entry.SCRIPT) -> bool:
    """srun mode keeps MASTER_PORT listening from the gate on and rank 0 serves torch's own
    store on that socket (``store_host.py``), as torchrun's agent hosts it; every torch takes
    this path. ``NODERUN_AGENT_STORE=0`` turns it off for a script that creates its own store
    on MASTER_PORT; an executable rank (``--no-python``) runs no Python that could serve it."""
    return (
        spec.mode is LaunchMode.SRUN
        and entry is not Entry.EXECUTABLE
        and environ.get(AGENT_STORE_SWITCH, "1") != "0"
    )


TORCHRUN_SIGNALS = "SIGTERM,SIGINT,SIGHUP,SIGQUIT"  # torchrun's --signals-to-handle default
TORCHRUN_DEFAULTS = {
    "TORCHELASTIC_RESTART_COUNT": "0",
    "TORCHELASTIC_MAX_RESTARTS": "0",
    "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
}
# torchrun's notice, verbatim (torch/distributed/run.py), when it sets OMP_NUM_THREADS
OMP_NOTICE = (
    "*****************************************",
    "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, to avoid "
    "your system being overloaded, please further tune the variable for optimal performance in "
    "your application as needed. ",
    "*****************************************",
)


def omp_threads_set(spec: NodeSpec, environ: Mapping[str, str]) -> bool:
    """Whether srun mode sets ``OMP_NUM_THREADS=1``: as torchrun, when it is unset and a node
    runs several ranks (each would otherwise start a thread per core)."""
    return (
        spec.mode is LaunchMode.SRUN
        and "OMP_NUM_THREADS" not in environ
        and spec.nproc_per_node > 1
    )


def error_file(spec: NodeSpec) -> Path:
    """Where torch's ``@record`` writes a rank's error (torchrun: under its log dir)."""
    return spec.run_dir / "logs" / "torchelastic" / f"rank{spec.index}" / "error.json"


def exec_env(
    spec: NodeSpec, environ: Mapping[str, str], agent_store: bool | None = None
) -> dict[str, str]:
    """torch's variables (the same in both modes) plus noderun's rank contract; ``agent_store``:
    whether node 0 serves the store (``hosts_store``, asked of ``environ`` when not given)."""
    env = dict(environ)
    env.update(
        MASTER_ADDR=spec.master_addr,
        MASTER_PORT=str(spec.master_port),
        PYTHONUNBUFFERED="1",
        **spec.contract().to_env(),
    )
    if spec.mode is LaunchMode.SRUN:
        env.update(
            RANK=str(spec.index),
            LOCAL_RANK=str(spec.local_rank),
            WORLD_SIZE=str(spec.world_size),
            LOCAL_WORLD_SIZE=str(spec.nproc_per_node),
            NODE_RANK=str(spec.node_rank),
            GROUP_RANK=str(spec.node_rank),
            # the rest of what torchrun's agent gives every worker (local_elastic_agent.py)
            ROLE_RANK=str(spec.index),
            ROLE_NAME="default",
            ROLE_WORLD_SIZE=str(spec.world_size),
            GROUP_WORLD_SIZE=str(spec.nnodes),
            # not TORCHELASTIC_RUN_ID: torch takes it for "launched by torchelastic"
            # (is_torchelastic_launched), and Lightning then picks its TorchElasticEnvironment
            # over SLURMEnvironment and loses SLURM's auto-requeue (seen on the lab)
            TORCHELASTIC_SIGNALS_TO_HANDLE=TORCHRUN_SIGNALS,
            TORCHELASTIC_ERROR_FILE=str(error_file(spec)),
        )
        for name, value in TORCHRUN_DEFAULTS.items():
            env.setdefault(name, value)  # the rank entry maps noderun's restart counters
        if omp_threads_set(spec, environ):
            env["OMP_NUM_THREADS"] = "1"
    if hosts_store(spec, environ) if agent_store is None else agent_store:
        # torch's env:// and tcp:// rendezvous then connect every rank, rank 0 too, as a client
        env["TORCHELASTIC_USE_AGENT_STORE"] = "True"
        env.setdefault("TORCHELASTIC_RESTART_COUNT", "0")
    return env


def _fail(err: NoderunError) -> NoReturn:
    # one write per line: several tasks share srun's output
    os.write(2, f"noderun.node: error: {err}\n".encode())
    raise SystemExit(err.exit_code)


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> NoReturn:
    env = os.environ if environ is None else environ
    try:
        options, command = split_command(sys.argv[1:] if argv is None else argv)
        opts = _parser().parse_args(options)
        spec = resolve(opts, env)
        timeline.stamp(spec.run_dir, "node_entered", f"node{spec.index}")
        this_host = env.get("SLURMD_NODENAME") or socket.gethostname()
        check_master(spec, this_host)
        entry = entry_of(opts)
        agent_store = hosts_store(spec, env, entry)  # decided once: rank 0's store and variables
        serve_store = spec.index == 0 and agent_store
        backlog = max(spec.participants, 128)  # every rank connects at once: gate, then store
        listener = listen(spec.master_port, this_host, backlog) if serve_store else None
        gate = NodeGate(
            index=spec.index,
            total=spec.participants,
            addr=spec.master_addr,
            port=spec.master_port,
            host=this_host,
            join_timeout=spec.join_timeout,
            describe=spec.describe,
            noun="nodes" if spec.mode is LaunchMode.TORCHRUN else "ranks",
            by_hand=not in_slurm_step(env),
            listener=listener,
            token=RankContract.from_env(env).job_token or "",  # strangers' check-ins dropped
            terms=f"--nproc-per-node={spec.nproc_per_node} --mode={spec.mode.value}",
        )
        gate.wait()
        timeline.stamp(spec.run_dir, "gate_passed", f"node{spec.index}")
        # rank 0 keeps the port listening; torch serves the store on it (rank_entry.py)
        handed = store_host.hand_over(listener) if listener is not None else {}
        if spec.mode is LaunchMode.SRUN:
            error_file(spec).parent.mkdir(parents=True, exist_ok=True)
            if spec.local_rank == 0 and omp_threads_set(spec, env):  # once a node, as torchrun
                for line in OMP_NOTICE:
                    os.write(2, f"{line}\n".encode())
    except NoderunError as err:
        _fail(err)
    new_argv = exec_argv(spec, command, sys.executable, entry, opts.torchrun_flag)
    # sbatch --signal=USR1@T reaches every process of the step: torchrun's agent (and a script
    # without a handler) would die of it; ranks that install a handler still receive it
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    if spec.mode is LaunchMode.SRUN and environ is None:
        # one Python start-up per rank, not two: this process becomes the rank, as the
        # rank entry would run it after an exec (nothing of torch is imported yet)
        from noderun import rank_entry

        os.environ.update(exec_env(spec, os.environ, agent_store), **handed)
        rank_entry.main(new_argv[2:])
    proc_guard.die_with_parent()  # kept across the exec: torchrun goes with its starter
    os.execve(new_argv[0], new_argv, {**exec_env(spec, env, agent_store), **handed})
