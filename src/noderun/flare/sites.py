"""A FLARE site's topology and the command its FLARE client runs. Pure: no processes, no I/O.

A site is one FL client whose training is a noderun job: ``nnodes`` x ``nproc_per_node`` ranks,
launched on this machine's simulated nodes (``local``) or inside the site's SLURM allocation
(``slurm``). SSH hosts are the next launcher: one more row in ``LAUNCHERS`` and one argv builder.
"""

from __future__ import annotations

import dataclasses
import re
import shlex
import sys
from collections.abc import Mapping, Sequence

from noderun.errors import UsageError
from noderun.topology import tasks_per_node

LAUNCHERS = {
    "local": "noderun run on simulated nodes of the FLARE client's machine",
    "slurm": "noderun run inside the site's SLURM allocation (srun, one torchrun per node)",
}
SITE_LAUNCH_MODULE = "noderun.flare.site_launch"
_SITE_NAME = re.compile(r"[a-z0-9][a-z0-9_.-]*")


@dataclasses.dataclass(frozen=True)
class Site:
    """One FL client: its name, its training script and how many ranks train for it."""

    name: str
    nnodes: int = 1
    nproc_per_node: int = 1
    launcher: str = "local"
    script: str | None = None  # None: the job's script
    args: str = ""

    def __post_init__(self) -> None:
        if not _SITE_NAME.fullmatch(self.name):
            raise UsageError(
                f"site name {self.name!r} is not a FLARE site name",
                "use lowercase letters, digits, '-', '_' or '.', e.g. site-1",
            )
        for field in ("nnodes", "nproc_per_node"):
            value = getattr(self, field)
            if not isinstance(value, int) or value < 1:
                raise UsageError(f"site {self.name}: {field}={value!r}", f"{field} must be >= 1")
        if self.launcher not in LAUNCHERS:
            raise UsageError(
                f"site {self.name}: unknown launcher {self.launcher!r}",
                f"valid: {', '.join(LAUNCHERS)} (ssh hosts: not yet)",
            )

    @property
    def world_size(self) -> int:
        return self.nnodes * self.nproc_per_node

    def command(self, python: str = sys.executable) -> str:
        """What FLARE runs for this site; FLARE appends ``custom/<script> <args>`` to it."""
        return shlex.join(
            [
                python,
                "-u",
                "-m",
                SITE_LAUNCH_MODULE,
                "--site",
                self.name,
                "--launcher",
                self.launcher,
                "--nnodes",
                str(self.nnodes),
                "--nproc-per-node",
                str(self.nproc_per_node),
            ]
        )


def site_table(sites: Sequence[Site], default_script: str) -> str:
    """One line per site: launcher, nodes x processes, ranks, script and arguments."""
    rows = [("site", "launcher", "nodes x procs", "ranks", "script", "args")]
    for site in sites:
        rows.append(
            (
                site.name,
                site.launcher,
                f"{site.nnodes} x {site.nproc_per_node}",
                str(site.world_size),
                site.script or default_script,
                site.args,
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )


def capacity_problem(
    site: Site, environ: Mapping[str, str], cpus: int, gpus: int
) -> UsageError | None:
    """Why ``site`` cannot start where ``environ`` says it runs, or None.

    A node runs at most one process per GPU (with GPUs) or per CPU core; a SLURM site needs
    its nodes and CPUs in the allocation it runs in."""
    if site.launcher == "slurm":
        job = environ.get("SLURM_JOB_ID")
        if not job:
            return UsageError(
                f"site {site.name} launches through SLURM but its FLARE client is not inside a "
                "SLURM allocation",
                f"start the client inside salloc/sbatch --nodes={site.nnodes}, or use "
                "launcher='local'",
            )
        nodes = int(environ.get("SLURM_JOB_NUM_NODES") or environ.get("SLURM_NNODES") or 1)
        if site.nnodes > nodes:
            return UsageError(
                f"site {site.name} asks for {site.nnodes} nodes but SLURM job {job} has {nodes}",
                f"allocate --nodes={site.nnodes} for the site's client, or lower its nnodes",
            )
        cpus_per_node = tasks_per_node(environ.get("SLURM_JOB_CPUS_PER_NODE", "") or "0")
        fewest = min(cpus_per_node, default=0)
        if fewest and site.nproc_per_node > fewest:
            return UsageError(
                f"site {site.name} asks for {site.nproc_per_node} processes per node but SLURM "
                f"job {job} has {fewest} CPUs on some node",
                f"allocate --cpus-per-task/--ntasks-per-node for {site.nproc_per_node}, or lower "
                "its nproc_per_node",
            )
        return None
    have, what = (gpus, "GPUs") if gpus else (cpus, "CPU cores")
    if site.nproc_per_node > have:
        return UsageError(
            f"site {site.name} asks for {site.nproc_per_node} processes per node but a node here "
            f"has {have} {what}",
            f"lower nproc_per_node to at most {have} (more nodes: raise nnodes)",
        )
    return None
