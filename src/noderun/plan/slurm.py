"""StepPlan: the one srun step that starts a whole job inside a SLURM allocation. Pure."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from noderun.plan.launch import Entry
from noderun.topology.node_spec import LaunchMode as LaunchMode  # re-exported: plans name it

# the gate runs before torch is imported, so 20 s is ample and the job ends within 30 s
DEFAULT_JOIN_TIMEOUT = 20.0
# srun --wait: once one task has ended, how long the others may take before srun kills them
SRUN_WAIT_SECONDS = 30


@dataclasses.dataclass(frozen=True)
class StepPlan:
    """``srun … python -m noderun.node … -- SCRIPT ARGS`` for ``nnodes`` × ``nproc_per_node``.

    ``master_port=None`` means the nodes derive it from the job id (two jobs never collide);
    ``hosts`` is empty when the nodes are not allocated yet (``noderun submit``).
    """

    mode: LaunchMode
    nnodes: int
    nproc_per_node: int
    run_dir: Path
    script: str
    script_args: tuple[str, ...] = ()
    join_timeout: float = DEFAULT_JOIN_TIMEOUT
    master_port: int | None = None
    hosts: tuple[str, ...] = ()
    nodelist: str | None = None  # srun --nodelist, when using fewer nodes than allocated
    python: str = sys.executable
    wait_seconds: int = SRUN_WAIT_SECONDS
    entry: Entry = Entry.SCRIPT  # script, -m module, or --no-python executable
    run_id: str | None = None  # torchrun's --rdzv-id (TORCHELASTIC_RUN_ID); None: the job id
    env: tuple[tuple[str, str], ...] = ()  # added to srun's environment (restart counts)
    agent_flags: tuple[str, ...] = ()  # torchrun agent options (torchrun mode only)
    direct: bool = False  # one node in torchrun mode, run from that node: torchrun, no srun

    def __str__(self) -> str:
        """What ``noderun run --dry-run`` prints inside an allocation."""
        how = "torchrun directly on this node" if self.direct else " ".join(self.srun_argv())
        return f"{self.rank_table()}\n{how}"

    @property
    def world_size(self) -> int:
        return self.nnodes * self.nproc_per_node

    @property
    def tasks_per_node(self) -> int:
        return 1 if self.mode is LaunchMode.TORCHRUN else self.nproc_per_node

    def host_of(self, node_rank: int) -> str:
        return self.hosts[node_rank] if node_rank < len(self.hosts) else f"node#{node_rank}"

    def node_of_rank(self, rank: int) -> int:
        """Global ranks are node-major in both modes (srun's default block distribution)."""
        return rank // self.nproc_per_node

    def node_argv(self) -> list[str]:
        """What every srun task runs: the per-node entrypoint, then ``--`` and the script."""
        argv = [
            self.python,
            "-m",
            "noderun.node",
            f"--mode={self.mode.value}",
            f"--nproc-per-node={self.nproc_per_node}",
            f"--nnodes={self.nnodes}",
            f"--run-dir={self.run_dir}",
            f"--join-timeout={self.join_timeout:g}",
        ]
        if self.master_port is not None:
            argv.append(f"--master-port={self.master_port}")
        if self.run_id is not None:
            argv.append(f"--run-id={self.run_id}")
        argv += [f"--torchrun-flag={flag}" for flag in self.agent_flags]
        return [*argv, *self.entry.flags(), "--", self.script, *self.script_args]

    def srun_options(self) -> list[str]:
        """srun's own options: fixed task layout, gang kill on a bad exit, bounded wait, labels."""
        options = [
            "srun",
            f"--nodes={self.nnodes}",
            f"--ntasks={self.nnodes * self.tasks_per_node}",
            f"--ntasks-per-node={self.tasks_per_node}",
            "--kill-on-bad-exit=1",
            f"--wait={self.wait_seconds}",
            "--label",
        ]
        if self.nodelist:
            options.append(f"--nodelist={self.nodelist}")
        return options

    def srun_argv(self) -> list[str]:
        return [*self.srun_options(), *self.node_argv()]

    def rank_table(self) -> str:
        """node → host → global ranks → local ranks, one line per node."""
        rows = [("node", "host", "ranks", "local ranks")]
        last_local = self.nproc_per_node - 1
        for node in range(self.nnodes):
            first = node * self.nproc_per_node
            host = self.hosts[node] if node < len(self.hosts) else "(allocated)"
            rows.append((str(node), host, _span(first, first + last_local), _span(0, last_local)))
        widths = [max(len(row[i]) for row in rows) for i in range(3)]
        return "\n".join(
            "  ".join(cell.ljust(width) for cell, width in zip(row[:3], widths, strict=True))
            + "  "
            + row[3]
            for row in rows
        )


def _span(first: int, last: int) -> str:
    return str(first) if first == last else f"{first}-{last}"
