"""RunRequest -> LaunchPlan | StepPlan: ``noderun run`` as a value. Pure: no I/O, no processes.

The verb asks the world first (the program exists, a free port, the run directory may be
used, the allocation's nodes, this machine's CPUs and GPUs, the SSH hosts' answers) and puts
the answers into the request as plain values; ``materialize()`` checks what is left and
returns the plan ``--dry-run`` prints (torchx's ``AppDryRunInfo``, like ``SubmitRequest``).
"""

from __future__ import annotations

import dataclasses
import enum
import sys
from collections.abc import Callable
from pathlib import Path

from noderun.errors import UsageError
from noderun.plan.launch import (
    TORCHRUN_DEFAULT_PORT,
    Entry,
    Gang,
    LaunchPlan,
    plan_hand_started,
    plan_local,
)
from noderun.plan.slurm import DEFAULT_JOIN_TIMEOUT, LaunchMode, StepPlan
from noderun.plan.ssh import SSH_GUARD, plan_ssh
from noderun.topology.contract import RankContract

NPROC_WORDS = ("gpu", "cpu", "auto")


class Where(enum.StrEnum):
    """Which nodes a run starts."""

    LOCAL = "local"  # N simulated nodes on this machine
    BY_HAND = "by-hand"  # this machine's node of a job started on every machine (--node-rank)
    SSH = "ssh"  # one node per host over ssh (--hosts/--hostfile)
    SLURM = "slurm"  # one srun step over the nodes of the allocation around noderun


def resolve_nproc(spec: int | str, cpus: int, gpus: int | None) -> int:
    """torchrun's ``determine_local_world_size``: gpu = visible GPUs (refused when none),
    cpu = usable CPUs, auto = GPUs when there are any, else CPUs."""
    if isinstance(spec, int):
        return spec
    if spec == "gpu":
        if not gpus:
            raise UsageError(
                "--nproc-per-node gpu but no GPU is visible here",
                "pass a number, or --nproc-per-node cpu/auto",
            )
        return gpus
    if spec == "auto" and gpus:
        return gpus
    return max(cpus, 1)


@dataclasses.dataclass(frozen=True)
class RunRequest:
    """The options of one ``noderun run`` attempt, plus the world's answers as values.

    ``master_port``: local, a port found free; SSH, the one node 0 offered; by hand and in
    SLURM, the one asked for (None: torchrun's default by hand, the job id's in SLURM).
    ``cpus``/``gpus``: what ``--nproc-per-node gpu|cpu|auto`` resolves against (``cpus`` None:
    an allocation that does not say). ``hosts``: SSH hosts, or the allocation's nodes.
    """

    where: Where
    program: str  # checked: a script's absolute path, a module's name, or an executable
    run_dir: Path
    nproc_per_node: int | str = 1
    script_args: tuple[str, ...] = ()
    entry: Entry = Entry.SCRIPT
    nnodes: int | None = None
    cpus: int | None = 1
    gpus: int | None = None
    master_port: int | None = None
    master_addr: str | None = None
    node_rank: int | None = None
    run_id: str | None = None  # --rdzv-id
    join_timeout: float = DEFAULT_JOIN_TIMEOUT
    max_restarts: int = 0
    attempt: int = 0  # 0: first start; n: the n-th restart of the whole gang
    host: str = "localhost"  # this machine's name
    hosts: tuple[str, ...] = ()
    mode: LaunchMode = LaunchMode.TORCHRUN
    job_id: str = ""
    python: str = sys.executable
    cwd: str = ""  # SSH: where the ranks start on every host
    env: tuple[tuple[str, str], ...] = ()  # --env K=V for every rank (SSH: also forwarded ones)
    hidden_env: tuple[str, ...] = ()  # SSH: names given with --env (masked when shown)
    ssh_config: str | None = None
    agent_flags: tuple[str, ...] = ()  # torchrun agent options, for every agent
    on_node: bool = False  # SLURM: noderun runs on the allocation's first node (sbatch)

    @property
    def nproc(self) -> int:
        return resolve_nproc(
            self.nproc_per_node, self.cpus if self.cpus is not None else 1, self.gpus
        )

    def restart_env(self) -> dict[str, str]:
        """The restart counters every rank sees, when noderun restarts the gang."""
        if not self.max_restarts:
            return {}
        return RankContract(restart_count=self.attempt, max_restarts=self.max_restarts).to_env()

    def rank_env(self) -> dict[str, str]:
        """What every rank gets on top of what it inherits: --env, then the restart counters."""
        return {**dict(self.env), **self.restart_env()}

    def check(self) -> None:
        """What can be refused from the values alone; UsageError with the fix."""
        nnodes = self.nnodes
        if self.where is Where.BY_HAND:
            if self.node_rank is None or not self.master_addr or nnodes is None or nnodes < 2:
                raise UsageError(
                    "a node started by hand needs --node-rank, --nnodes (2 or more) and "
                    "--master-addr",
                    "run `noderun run --nnodes N --node-rank R --master-addr NODE0 "
                    "[--master-port P] SCRIPT` on every machine, R = 0..N-1",
                )
            if not 0 <= self.node_rank < nnodes:
                raise UsageError(
                    f"--node-rank {self.node_rank} is not in 0..{nnodes - 1}",
                    "give 0..N-1 for --nnodes N",
                )
        if self.where is Where.SSH and nnodes not in (None, len(self.hosts)):
            raise UsageError(
                f"--nnodes {nnodes} but {len(self.hosts)} host(s) given",
                "leave --nnodes out: one node per host",
            )
        allocated = self.hosts
        if self.where is Where.SLURM and (nnodes or len(allocated) or 1) > len(allocated):
            nnodes = nnodes or 1
            raise UsageError(
                f"--nnodes {nnodes} but job {self.job_id} has {len(allocated)} node(s) "
                f"({', '.join(allocated)})",
                f"ask for the nodes at allocation time (salloc/sbatch --nodes={nnodes}) or lower "
                "--nnodes",
            )

    def materialize(self) -> LaunchPlan | StepPlan:
        return plan(self)

    def launch_plan(self) -> LaunchPlan:
        """``plan()`` for the nodes noderun starts itself (not an srun step)."""
        launch = plan(self)
        assert isinstance(launch, LaunchPlan), "a SLURM request materializes to a StepPlan"
        return launch

    def gang(self, master_addr: str, master_port: int, run_id: str | None = None) -> Gang:
        """The nodes' shared part; the run id by default ``--rdzv-id``, else the run's name."""
        return Gang(
            nnodes=len(self.hosts) if self.where is Where.SSH else self.nnodes or 1,
            nproc_per_node=self.nproc,
            master_addr=master_addr,
            master_port=master_port,
            run_dir=self.run_dir,
            script=self.program,
            script_args=self.script_args,
            run_id=run_id or self.run_id or self.run_dir.name,
            python=self.python,
            entry=self.entry,
            agent_flags=self.agent_flags,
        )


def plan(request: RunRequest) -> LaunchPlan | StepPlan:
    """The plan of ``request``'s backend, checked: exactly what ``--dry-run`` prints
    (``str(plan)``), and what the backend then starts."""
    request.check()
    return _PLANNERS[request.where](request)


def local_nodes(request: RunRequest) -> LaunchPlan:
    """Backend ``LocalBackend``: N simulated nodes here, one torchrun agent each."""
    assert request.master_port is not None, "the verb finds a free port first"
    return plan_local(request.gang("127.0.0.1", request.master_port), request.rank_env())


def hand_started(request: RunRequest) -> LaunchPlan:
    """Backend ``LocalBackend``: this machine's node of a job started by hand on every one."""
    assert request.node_rank is not None and request.master_addr
    port = request.master_port or TORCHRUN_DEFAULT_PORT  # torchrun's default, on every node
    run_id = request.run_id or f"hand-{request.master_addr}-{port}"
    return plan_hand_started(
        request.gang(request.master_addr, port, run_id),
        node_rank=request.node_rank,
        join_timeout=request.join_timeout,
        host=request.host,
        env=request.rank_env(),
    )


def ssh_hosts(request: RunRequest) -> LaunchPlan:
    """Backend ``SshBackend``: one node per host, started over ssh from here."""
    assert request.master_port is not None, "node 0 offered a port first"
    return plan_ssh(
        request.gang(request.hosts[0], request.master_port),
        request.hosts,
        cwd=request.cwd,
        guard=SSH_GUARD,
        env=request.rank_env(),
        ssh_config=request.ssh_config,
        hidden=request.hidden_env,
    )


def slurm_step(request: RunRequest) -> StepPlan:
    """Backend ``StepBackend``: one srun step over the allocation's first ``nnodes`` nodes
    (torchrun directly for one node in torchrun mode run from that node)."""
    nnodes, nproc, hosts = request.nnodes or len(request.hosts) or 1, request.nproc, request.hosts
    if request.mode is LaunchMode.SRUN and request.cpus is not None and nproc > request.cpus:
        raise UsageError(
            f"--nproc-per-node {nproc} in srun mode needs that many CPUs per node, "
            f"but job {request.job_id} has {request.cpus} on some node",
            f"allocate with --ntasks-per-node={nproc}, or use --mode torchrun",
        )
    return StepPlan(
        mode=request.mode,
        nnodes=nnodes,
        nproc_per_node=nproc,
        run_dir=request.run_dir,
        script=request.program,
        script_args=request.script_args,
        join_timeout=request.join_timeout,
        master_port=request.master_port,
        hosts=hosts[:nnodes],
        nodelist=",".join(hosts[:nnodes]) if nnodes < len(hosts) else None,
        python=request.python,
        entry=request.entry,
        run_id=request.run_id,
        env=tuple(request.rank_env().items()),
        agent_flags=request.agent_flags,
        direct=nnodes == 1 and request.mode is LaunchMode.TORCHRUN and request.on_node,
    )


_PLANNERS: dict[Where, Callable[[RunRequest], LaunchPlan | StepPlan]] = {
    Where.LOCAL: local_nodes,
    Where.BY_HAND: hand_started,
    Where.SSH: ssh_hosts,
    Where.SLURM: slurm_step,
}
