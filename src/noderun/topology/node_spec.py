"""NodeSpec: where one ``python -m noderun.node`` task sits in the job. Pure.

Built from the entry's options and the srun step's variables (``NodeSpec.from_env``), the way
NVFLARE's ``NodeGroup.from_env(environ)`` is: no DNS, no ``scontrol``. The caller passes the
step's host list when it expanded it itself (``scontrol show hostnames``); otherwise the pure
hostlist parser expands it.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping, Sequence
from pathlib import Path

from noderun.errors import TopologyError, UsageError
from noderun.topology.contract import RankContract
from noderun.topology.hostlist import expand_hostlist, tasks_per_node
from noderun.topology.model import in_slurm_step
from noderun.topology.ports import port_for_job
from noderun.topology.variables import read_int

SRUN_HINT = "srun --nodes=N --ntasks-per-node=1 python -m noderun.node … -- SCRIPT"


class LaunchMode(enum.StrEnum):
    """Who starts the ranks on each node."""

    TORCHRUN = "torchrun"  # one torchrun agent per node (srun task), P workers each
    SRUN = "srun"  # one srun task per rank (frameworks that read SLURM variables themselves)


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
    run_id: str = ""

    @property
    def world_size(self) -> int:
        return self.nnodes * self.nproc_per_node

    @property
    def participants(self) -> int:
        """How many check in at the gate: nodes (torchrun mode) or ranks (srun mode)."""
        return self.nnodes if self.mode is LaunchMode.TORCHRUN else self.world_size

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

    def contract(self) -> RankContract:
        """What this node's ranks are told by noderun (beyond torch's own variables)."""
        return RankContract(
            run_dir=str(self.run_dir),
            node_rank=self.node_rank,
            join_timeout=self.join_timeout,
            mode=self.mode.value if self.mode is LaunchMode.SRUN else None,
        )

    @classmethod
    def from_env(
        cls,
        environ: Mapping[str, str],
        *,
        mode: LaunchMode,
        nproc_per_node: int,
        run_dir: Path,
        join_timeout: float,
        nnodes: int | None = None,
        node_rank: int | None = None,
        master_addr: str | None = None,
        master_port: int | None = None,
        run_id: str | None = None,
        hosts: Sequence[str] | None = None,
    ) -> NodeSpec:
        """Explicit values win; otherwise the srun step's variables. Raises with a hint.

        ``hosts``: the step's nodes, expanded by the caller (default: the pure parser).
        """
        in_step = in_slurm_step(environ)
        if not in_step and not (node_rank is not None and nnodes is not None and master_addr):
            raise UsageError(
                "python -m noderun.node is not running inside an srun step",
                f"start it on every node with `{SRUN_HINT}` (or pass --node-rank, --nnodes and "
                "--master-addr)",
            )
        step_hosts = tuple(
            expand_hostlist(environ.get("SLURM_STEP_NODELIST", "")) if hosts is None else hosts
        )
        node_rank = node_rank if node_rank is not None else read_int(environ, "SLURM_NODEID")
        count = (
            nnodes or read_int(environ, "SLURM_STEP_NUM_NODES", "SLURM_NNODES") or len(step_hosts)
        )
        if count > len(step_hosts):  # hosts of nodes outside this step, for messages only
            job_hosts = expand_hostlist(environ.get("SLURM_JOB_NODELIST", ""))
            step_hosts += tuple(h for h in job_hosts if h not in step_hosts)
        if node_rank is None or not 0 <= node_rank < count:
            raise TopologyError(
                f"node rank {node_rank} is not in 0..{count - 1}", "check --node-rank/--nnodes"
            )
        per_node = tasks_per_node(environ.get("SLURM_STEP_TASKS_PER_NODE", "") or "1")
        here = per_node[node_rank] if node_rank < len(per_node) else per_node[0]
        expected = 1 if mode is LaunchMode.TORCHRUN else nproc_per_node
        if in_step and here != expected:
            where = step_hosts[node_rank] if step_hosts else "this node"
            raise UsageError(
                f"{here} noderun.node task(s) on {where} but {mode.value} mode needs {expected} "
                "per node",
                f"srun --ntasks-per-node={expected} (`noderun run`/`noderun submit` set this up)",
            )
        job_id = environ.get("SLURM_JOB_ID", "")
        # NODERUN_MASTER_PORT: the --master-port option's variable, for the entry as for verbs
        port = master_port or read_int(environ, "NODERUN_MASTER_PORT")
        if port is None:
            if not job_id:
                raise UsageError("no SLURM_JOB_ID to derive MASTER_PORT from", "pass --master-port")
            port = port_for_job(job_id)
        addr = master_addr or (step_hosts[0] if step_hosts else "")
        if not addr:
            raise TopologyError("the step's node list is empty", "pass --master-addr")
        rank = read_int(environ, "SLURM_PROCID") or 0
        return cls(
            mode=mode,
            index=node_rank if mode is LaunchMode.TORCHRUN else rank,
            node_rank=node_rank,
            nnodes=count,
            nproc_per_node=nproc_per_node,
            hosts=step_hosts,
            master_addr=addr,
            master_port=port,
            run_dir=run_dir,
            job_id=job_id,
            join_timeout=join_timeout,
            local_rank=read_int(environ, "SLURM_LOCALID") or 0,
            run_id=run_id or job_id or run_dir.name,
        )
