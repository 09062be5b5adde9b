"""Topology: who am I and who are the others, from any launcher's environment variables."""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping

from noderun.errors import (
    DeviceOrdinalError,
    InconsistentTopologyError,
    MissingLauncherError,
)
from noderun.topology.contract import VARIABLES
from noderun.topology.hostlist import expand_hostlist, tasks_per_node
from noderun.topology.ports import port_for_job
from noderun.topology.variables import read_int

DEFAULT_PORT = 29500


class Launcher(enum.StrEnum):
    """What started this process."""

    TORCHRUN = "torchrun"
    ENV = "env"  # RANK/WORLD_SIZE set by hand or by noderun's srun mode
    SLURM = "slurm"
    OPENMPI = "openmpi"
    SINGLE = "single"


# Logical field -> candidate variable names, first present wins (submitit's idea: adding a
# launcher is adding a mapping, not a code path).
SOURCES: dict[Launcher, dict[str, tuple[str, ...]]] = {
    Launcher.TORCHRUN: {
        "rank": ("RANK",),
        "local_rank": ("LOCAL_RANK",),
        "world_size": ("WORLD_SIZE",),
        "local_world_size": ("LOCAL_WORLD_SIZE",),
        "node_rank": ("GROUP_RANK", "NODE_RANK"),
        "nnodes": ("GROUP_WORLD_SIZE",),
    },
    Launcher.ENV: {
        "rank": ("RANK",),
        "local_rank": ("LOCAL_RANK",),
        "world_size": ("WORLD_SIZE",),
        "local_world_size": ("LOCAL_WORLD_SIZE",),
        "node_rank": ("GROUP_RANK", "NODE_RANK"),
    },
    Launcher.SLURM: {
        "rank": ("SLURM_PROCID",),
        "local_rank": ("SLURM_LOCALID",),
        "world_size": ("SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"),
        "node_rank": ("SLURM_NODEID",),
        "nnodes": ("SLURM_STEP_NUM_NODES", "SLURM_NNODES"),
    },
    Launcher.OPENMPI: {
        "rank": ("OMPI_COMM_WORLD_RANK",),
        "local_rank": ("OMPI_COMM_WORLD_LOCAL_RANK",),
        "world_size": ("OMPI_COMM_WORLD_SIZE",),
        "local_world_size": ("OMPI_COMM_WORLD_LOCAL_SIZE",),
        "node_rank": ("OMPI_COMM_WORLD_NODE_RANK",),
    },
}


def detect_launcher(environ: Mapping[str, str]) -> Launcher:
    """Pick the rank source in DESIGN.md's order: torchrun, env, SLURM step, Open MPI, single."""
    if "RANK" in environ and "WORLD_SIZE" in environ:
        # noderun's srun mode gives torchrun's variables too, but no agent hosts a rendezvous
        by_agent = environ.get(VARIABLES["mode"][0]) != "srun"
        return Launcher.TORCHRUN if "TORCHELASTIC_RUN_ID" in environ and by_agent else Launcher.ENV
    if in_slurm_step(environ) and "SLURM_PROCID" in environ:
        return Launcher.SLURM
    if "OMPI_COMM_WORLD_RANK" in environ:
        return Launcher.OPENMPI
    return Launcher.SINGLE


def in_slurm_step(environ: Mapping[str, str]) -> bool:
    """Inside an srun step (slurmstepd started this process), not a batch script or salloc.

    >>> in_slurm_step({"SLURM_JOB_ID": "7", "SLURM_STEP_ID": "0"})
    True
    >>> in_slurm_step({"SLURM_JOB_ID": "7", "SLURM_NTASKS": "4"})  # the batch script itself
    False
    """
    return "SLURM_STEP_ID" in environ or "SLURM_STEPID" in environ


def slurm_job_id(environ: Mapping[str, str]) -> str:
    """The id SLURM's commands and its user know this job by: ``SLURM_JOB_ID``, but
    ``<array job>_<task>`` for a task of a job array (one task carries the array's own id as
    its SLURM_JOB_ID: scancel or requeue of that id reaches every task); "" outside SLURM.

    >>> slurm_job_id({"SLURM_JOB_ID": "51", "SLURM_ARRAY_JOB_ID": "50", "SLURM_ARRAY_TASK_ID": "1"})
    '50_1'
    """
    array, task = environ.get("SLURM_ARRAY_JOB_ID", ""), environ.get("SLURM_ARRAY_TASK_ID", "")
    return f"{array}_{task}" if array and task else environ.get("SLURM_JOB_ID", "")


def in_slurm_allocation(environ: Mapping[str, str]) -> bool:
    """In a SLURM job (sbatch script or salloc shell) but outside any srun step."""
    return bool(environ.get("SLURM_JOB_ID")) and not in_slurm_step(environ)


def _missing_launcher_check(environ: Mapping[str, str]) -> None:
    """Seed 002: inside an sbatch script with N>1 tasks, but python was not started by srun."""
    if "SLURM_JOB_ID" not in environ or in_slurm_step(environ):
        return
    ntasks = read_int(environ, "SLURM_NTASKS") or 1
    if ntasks > 1:
        raise MissingLauncherError(
            f"python started without srun inside SLURM job {environ['SLURM_JOB_ID']} with "
            f"SLURM_NTASKS={ntasks}: only 1 of {ntasks} ranks will ever join",
            "launch every rank with `srun python SCRIPT …` or `noderun run SCRIPT …`",
        )


@dataclasses.dataclass(frozen=True)
class Topology:
    """Where this process sits: built by :meth:`from_env`, checked by :meth:`validate`."""

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    local_world_size: int = 1
    node_rank: int = 0
    nnodes: int = 1
    master_addr: str | None = None
    master_port: int | None = None
    launcher: Launcher = Launcher.SINGLE
    job_id: str | None = None
    hosts: tuple[str, ...] = ()

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def is_distributed(self) -> bool:
        return self.world_size > 1

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Topology:
        """Resolve the topology from ``environ``; raise a TopologyError with a hint if wrong.

        >>> Topology.from_env({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1",
        ...     "MASTER_ADDR": "h", "MASTER_PORT": "29500"}).rank
        1
        """
        launcher = detect_launcher(environ)
        if launcher is Launcher.SINGLE:
            _missing_launcher_check(environ)
            return cls(
                master_addr=environ.get("MASTER_ADDR"),
                master_port=read_int(environ, "MASTER_PORT"),
                job_id=environ.get("SLURM_JOB_ID"),
            )
        fields = {
            name: read_int(environ, *variables) for name, variables in SOURCES[launcher].items()
        }
        rank = fields["rank"] or 0
        world_size = fields["world_size"] or 1
        local_rank = fields["local_rank"] if fields["local_rank"] is not None else 0
        hosts: tuple[str, ...] = ()
        job_id = environ.get("SLURM_JOB_ID")
        if launcher is Launcher.SLURM:
            hosts = tuple(
                expand_hostlist(
                    environ.get("SLURM_STEP_NODELIST") or environ.get("SLURM_JOB_NODELIST", "")
                )
            )
            per_node = tasks_per_node(
                environ.get("SLURM_STEP_TASKS_PER_NODE")
                or environ.get("SLURM_TASKS_PER_NODE")
                or str(world_size)
            )
            node_rank = fields["node_rank"] or 0
            local_world_size = per_node[node_rank] if node_rank < len(per_node) else per_node[0]
            nnodes = fields["nnodes"] or len(hosts) or 1
        else:
            # without LOCAL_WORLD_SIZE the job is taken to be one node
            local_world_size = fields["local_world_size"] or world_size
            node_rank = fields["node_rank"] if fields["node_rank"] is not None else 0
            nnodes = fields.get("nnodes") or max(world_size // max(local_world_size, 1), 1)
        master_addr = environ.get("MASTER_ADDR") or (hosts[0] if hosts else None)
        master_port = read_int(environ, "MASTER_PORT")
        if master_port is None and launcher is Launcher.SLURM and job_id:
            master_port = port_for_job(job_id)
        return cls(
            rank=rank,
            local_rank=local_rank,
            world_size=world_size,
            local_world_size=local_world_size,
            node_rank=node_rank,
            nnodes=nnodes,
            master_addr=master_addr,
            master_port=master_port or (DEFAULT_PORT if world_size > 1 else None),
            launcher=launcher,
            job_id=job_id,
            hosts=hosts,
        )

    def validate(self, device_count: int = 0) -> Topology:
        """Check the values agree with each other and with ``device_count`` visible devices."""
        where = f"(from {self.launcher.value} variables)"
        for name in ("rank", "local_rank", "node_rank"):
            if getattr(self, name) < 0:
                raise InconsistentTopologyError(
                    f"{name}={getattr(self, name)} is negative {where}", "ranks start at 0"
                )
        if self.world_size < 1 or self.local_world_size < 1 or self.nnodes < 1:
            raise InconsistentTopologyError(
                f"world_size={self.world_size}, local_world_size={self.local_world_size}, "
                f"nnodes={self.nnodes} must all be >= 1 {where}",
                "check WORLD_SIZE / LOCAL_WORLD_SIZE / SLURM_NTASKS",
            )
        if self.rank >= self.world_size:
            raise InconsistentTopologyError(
                f"rank {self.rank} >= world_size {self.world_size} {where}",
                "ranks run from 0 to world_size-1; was WORLD_SIZE set per node, not in total?",
            )
        if self.local_rank >= self.local_world_size:
            raise InconsistentTopologyError(
                f"local_rank {self.local_rank} >= local_world_size {self.local_world_size} {where}",
                "LOCAL_RANK counts processes on this node only; is the global rank used as local?",
            )
        if self.node_rank >= self.nnodes:
            raise InconsistentTopologyError(
                f"node_rank {self.node_rank} >= nnodes {self.nnodes} {where}",
                "node ranks run from 0 to nnodes-1",
            )
        homogeneous = self.launcher in (Launcher.TORCHRUN, Launcher.ENV, Launcher.OPENMPI)
        if homogeneous and self.world_size != self.nnodes * self.local_world_size:
            raise InconsistentTopologyError(
                f"world_size {self.world_size} != nnodes {self.nnodes} x local_world_size "
                f"{self.local_world_size} {where}",
                "start the same number of processes on every node (--nproc-per-node)",
            )
        if self.world_size > 1 and self.nnodes > 1 and not self.master_addr:
            raise InconsistentTopologyError(
                f"MASTER_ADDR is not set for a {self.nnodes}-node world of {self.world_size} ranks",
                "export MASTER_ADDR=<first node's hostname> on every node, or use `noderun run`",
            )
        if device_count > 0 and self.local_rank >= device_count:
            raise DeviceOrdinalError(
                f"local_rank {self.local_rank} but only {device_count} visible device(s) "
                f"(rank {self.rank}): invalid device ordinal",
                "use LOCAL_RANK, not RANK, as the device index "
                "(torch.cuda.set_device(local_rank)), and run at most one process per GPU",
            )
        return self

    def describe(self) -> str:
        """One line for logs: ``rank 3/4 (local 1/2, node 1/2) via torchrun``."""
        return (
            f"rank {self.rank}/{self.world_size} (local {self.local_rank}/{self.local_world_size},"
            f" node {self.node_rank}/{self.nnodes}) via {self.launcher.value}"
        )

    def to_dict(self) -> dict[str, object]:
        data = dataclasses.asdict(self)
        data["launcher"] = self.launcher.value
        data["hosts"] = list(self.hosts)
        return data
