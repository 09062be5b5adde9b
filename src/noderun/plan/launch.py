"""LaunchPlan: what runs on which node, as argv + env. Pure: no processes, no I/O."""

from __future__ import annotations

import dataclasses
import enum
import os
import shlex
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from noderun import secret_env
from noderun.topology.contract import RankContract


class Entry(enum.StrEnum):
    """How a rank starts its program, as torchrun's flags say it."""

    SCRIPT = "script"  # python SCRIPT ARGS
    MODULE = "module"  # -m/--module: python -m MODULE ARGS
    EXECUTABLE = "executable"  # --no-python: EXECUTABLE ARGS, no python in front

    def flags(self) -> list[str]:
        """The torchrun-style flags that select this entry (``[]`` for a script)."""
        return {Entry.MODULE: ["--module"], Entry.EXECUTABLE: ["--no-python"]}.get(self, [])


@dataclasses.dataclass(frozen=True)
class NodeCommand:
    """One node's agent: the argv to exec and the variables to add to its environment."""

    node_rank: int
    host: str
    argv: tuple[str, ...]
    env: Mapping[str, str]
    label: str = ""  # the console prefix before ``:rank|`` (default: the node rank)
    remote: bool = False  # started over SSH: stdin stays open, the far end watches it
    # the ranks' variables, sent as the first line of stdin (JSON) to the far end's guard: a
    # command line is visible to every user of both machines in `ps`
    stdin_env: Mapping[str, str] = dataclasses.field(default_factory=dict)
    hidden: frozenset[str] = frozenset()  # names whose values are shown masked (``--env``)

    @property
    def prefix(self) -> str:
        return self.label or str(self.node_rank)

    def shell(self) -> str:
        """The command as copy-pasteable shell text, every word quoted; secrets masked."""
        env = secret_env.masked(self.env, self.hidden)
        exports = " ".join(_pair(k, v) for k, v in sorted(env.items()))
        text = f"{exports} {shlex.join(self.argv)}".strip()
        if self.stdin_env:
            sent = secret_env.masked(self.stdin_env, self.hidden)
            pairs = " ".join(_pair(k, v) for k, v in sorted(sent.items()))
            text += f"  # on its stdin: {pairs}"
        return text


def _pair(name: str, value: str) -> str:
    return f"{name}={value if value == secret_env.MASK else shlex.quote(value)}"


# Every rank runs through this file (by path: nothing of noderun is imported before the
# script); it leaves with os._exit so torch's gloo finalization abort never hits a finished rank.
RANK_ENTRY = os.path.join(os.path.dirname(os.path.dirname(__file__)), "rank_entry.py")


def rank_command(script: str, script_args: Sequence[str], entry: Entry = Entry.SCRIPT) -> list[str]:
    """What a rank's python runs: the rank entry, its entry flag, the program and arguments."""
    return [RANK_ENTRY, *entry.flags(), script, *script_args]


def torchrun_argv(
    *,
    nnodes: int,
    nproc_per_node: int,
    node_rank: int,
    master_addr: str,
    master_port: int,
    run_id: str,
    log_dir: Path,
    script: str,
    script_args: Sequence[str],
    python: str = sys.executable,
    entry: Entry = Entry.SCRIPT,
    agent_flags: Sequence[str] = (),
) -> list[str]:
    """torchrun with static rendezvous (several agents may share one host), no restarts:
    noderun restarts the whole gang itself (``--max-restarts``). ``agent_flags``: the user's
    torchrun agent options (``--start-method=fork``), as given."""
    return [
        python,
        "-m",
        "torch.distributed.run",
        f"--nnodes={nnodes}",
        f"--nproc-per-node={nproc_per_node}",
        f"--node-rank={node_rank}",
        f"--master-addr={master_addr}",
        f"--master-port={master_port}",
        f"--rdzv-id={run_id}",
        "--max-restarts=0",
        f"--log-dir={log_dir}",
        # one JSON line per worker that ended: its rank and exit code, read by the supervisor
        "--event-log-handler=console",
        "--redirects=3",
        "--tee=3",
        *agent_flags,
        *rank_command(script, script_args, entry),
    ]


@dataclasses.dataclass(frozen=True)
class Gang:
    """What every node of one launch shares: its shape, its rendezvous and its program."""

    nnodes: int
    nproc_per_node: int
    master_addr: str
    master_port: int
    run_dir: Path
    script: str
    script_args: tuple[str, ...] = ()
    run_id: str = ""
    python: str = sys.executable
    entry: Entry = Entry.SCRIPT
    agent_flags: tuple[str, ...] = ()  # torchrun agent options every agent gets

    def agent_argv(self, node_rank: int) -> list[str]:
        """Node ``node_rank``'s torchrun agent; its logs under the run directory."""
        return torchrun_argv(
            nnodes=self.nnodes,
            nproc_per_node=self.nproc_per_node,
            node_rank=node_rank,
            master_addr=self.master_addr,
            master_port=self.master_port,
            run_id=self.run_id or self.run_dir.name,
            log_dir=self.run_dir / "logs" / "torchelastic" / f"node{node_rank}",
            script=self.script,
            script_args=self.script_args,
            python=self.python,
            entry=self.entry,
            agent_flags=self.agent_flags,
        )

    def rank_env(self, node_rank: int, env: Mapping[str, str] | None = None) -> dict[str, str]:
        """``env`` plus the rank contract of node ``node_rank``'s ranks."""
        contract = RankContract(run_dir=str(self.run_dir), node_rank=node_rank)
        return {**(env or {}), **contract.to_env(), "PYTHONUNBUFFERED": "1"}

    def plan(self, nodes: Sequence[NodeCommand]) -> LaunchPlan:
        shared = {field.name: getattr(self, field.name) for field in dataclasses.fields(Gang)}
        return LaunchPlan(**shared, nodes=tuple(nodes))


@dataclasses.dataclass(frozen=True, kw_only=True)
class LaunchPlan(Gang):
    """A whole job: the gang's nodes × processes per node, one rendezvous, one run directory."""

    nodes: tuple[NodeCommand, ...]

    @property
    def world_size(self) -> int:
        return self.nnodes * self.nproc_per_node

    def ranks_of(self, node_rank: int) -> range:
        """Global ranks on ``node_rank`` (static rendezvous: node-major order)."""
        start = node_rank * self.nproc_per_node
        return range(start, start + self.nproc_per_node)

    def rank_table(self) -> str:
        """node → global ranks → local ranks, one line per node."""
        lines = ["node  host              ranks        local ranks"]
        for node in self.nodes:
            ranks = self.ranks_of(node.node_rank)
            lines.append(
                f"{node.node_rank:<5} {node.host:<17} {ranks.start}-{ranks.stop - 1:<10} "
                f"0-{self.nproc_per_node - 1}"
            )
        return "\n".join(lines)

    def __str__(self) -> str:
        return "\n".join([self.rank_table(), *(n.shell() for n in self.nodes)])


def plan_local(gang: Gang, env: Mapping[str, str] | None = None) -> LaunchPlan:
    """N simulated nodes on this machine, one torchrun agent each, one rendezvous."""
    return gang.plan(
        [
            NodeCommand(
                node_rank=node,
                host=f"localhost/{node}",
                argv=tuple(gang.agent_argv(node)),
                env=gang.rank_env(node, env),
            )
            for node in range(gang.nnodes)
        ]
    )


TORCHRUN_DEFAULT_PORT = 29500


def plan_hand_started(
    gang: Gang, *, node_rank: int, join_timeout: float, host: str, env: Mapping[str, str] | None
) -> LaunchPlan:
    """One node of a job whose nodes are started by hand, one command per machine (seed
    001): this machine's node entry, which checks in with node 0's gate (any start order;
    a node that never comes is named) and then runs torchrun for its ranks."""
    argv = [
        gang.python,
        "-m",
        "noderun.node",
        "--mode=torchrun",
        f"--nproc-per-node={gang.nproc_per_node}",
        f"--nnodes={gang.nnodes}",
        f"--node-rank={node_rank}",
        f"--master-addr={gang.master_addr}",
        f"--master-port={gang.master_port}",
        f"--run-dir={gang.run_dir}",
        f"--join-timeout={join_timeout:g}",
        f"--run-id={gang.run_id}",
        *(f"--torchrun-flag={flag}" for flag in gang.agent_flags),
        *gang.entry.flags(),
        "--",
        gang.script,
        *gang.script_args,
    ]
    node = NodeCommand(
        node_rank=node_rank,
        host=host,
        argv=tuple(argv),
        env={**(env or {}), "PYTHONUNBUFFERED": "1"},
    )
    return gang.plan([node])
