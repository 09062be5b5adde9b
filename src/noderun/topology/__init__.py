"""Pure topology resolution: environ dict in, frozen Topology out."""

from noderun.topology.hostlist import expand_hostlist, tasks_per_node
from noderun.topology.model import (
    Launcher,
    Topology,
    detect_launcher,
    in_slurm_allocation,
    in_slurm_step,
    slurm_job_id,
)
from noderun.topology.ports import port_for_job

__all__ = [
    "Launcher",
    "Topology",
    "detect_launcher",
    "expand_hostlist",
    "in_slurm_allocation",
    "in_slurm_step",
    "port_for_job",
    "slurm_job_id",
    "tasks_per_node",
]
