"""Run the probes and the collective test on every node through the launch backends; aggregate.

Every mode but nodes started by hand runs two gangs, as ``noderun run`` starts its ranks:
the probe (one per node; stdlib and psutil, no torch) as each node's command, then the
collective test's ranks. Here that is the local backend, over SSH the same supervisor with
ssh in front, in an allocation one srun step (``StepSupervisor``). Nodes started by hand have
no launcher to start anything on the others: each probes itself in process and swaps facts
through node 0 (``doctor/exchange.py``).

``noderun doctor --submit`` renders a small sbatch script that runs ``noderun doctor`` inside
the allocation and writes its JSON result into the run directory, then waits for it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from noderun.backends import slurm
from noderun.backends.local import LocalSupervisor
from noderun.backends.ports import free_port
from noderun.backends.slurm_step import StepSupervisor
from noderun.check_result import failed, skipped
from noderun.doctor.checks import NodeCheck, collective_check, healthy, node_checks
from noderun.doctor.collective import MARKER as COLLECTIVE_MARKER
from noderun.doctor.probe import MARKER as PROBE_MARKER
from noderun.errors import UsageError
from noderun.plan.launch import Entry, Gang, LaunchPlan, plan_local
from noderun.plan.sbatch import SbatchPlan, SubmitRequest
from noderun.plan.slurm import LaunchMode, StepPlan
from noderun.secret_env import is_secret
from noderun.srun_lines import read_marked
from noderun.topology import port_for_job
from noderun.topology.contract import RankContract, job_token

PROBE_WAIT = 20.0
HAND_WAIT = 60.0  # nodes started by hand: start every node within this many seconds
STEP_TIMEOUT = 180.0
RESULT_FILE = "doctor.json"
PROBE = "noderun.doctor.probe"  # run as a module on every node
COLLECTIVE = "noderun.doctor.collective"  # run as a module by every rank
TASKS = "NODERUN_DOCTOR_TASKS_PER_NODE"  # the ranks per node the collective will start


@dataclasses.dataclass(frozen=True)
class Checklist:
    """Seed 001's checklist items the probes answer: a script to hash on every node (with
    noderun and torch, always), and paths every node must see."""

    script: str | None = None
    paths: tuple[str, ...] = ()

    def args(self) -> list[str]:
        """As probe (and doctor) arguments: ``--script S --check-path P …``."""
        out = ["--script", self.script] if self.script else []
        for path in self.paths:
            out += ["--check-path", path]
        return out


@dataclasses.dataclass
class DoctorResult:
    mode: str
    nodes: list[str]
    checks: list[NodeCheck]
    collective: dict[str, Any] | None
    run_dir: str
    duration_sec: float | None = None
    step_seconds: dict[str, float] = dataclasses.field(default_factory=dict)

    @property
    def healthy(self) -> bool:
        return healthy(self.checks)

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "healthy": self.healthy,
            "nodes": self.nodes,
            "run_dir": self.run_dir,
            "duration_sec": self.duration_sec,
            "step_seconds": self.step_seconds,
            "checks": [c.to_dict() for c in self.checks],
            "collective": self.collective,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DoctorResult:
        from noderun.check_result import Check, Status

        checks = [
            NodeCheck(
                c["node"], Check(c["check"], Status(c["status"]), c["detail"], c.get("fix", ""))
            )
            for c in data["checks"]
        ]
        return cls(
            data["mode"],
            data["nodes"],
            checks,
            data["collective"],
            data["run_dir"],
            data.get("duration_sec"),
            data.get("step_seconds", {}),
        )


def _marked(text: str, marker: str) -> list[dict[str, Any]]:
    return [v for v in read_marked(text, marker) if isinstance(v, dict)]


def _probe_argv(
    run_dir: Path, master: str, port: int, nnodes: int, checklist: Checklist
) -> list[str]:
    """The probe every node runs; the shared-filesystem token it reads is written here (node
    0's run directory) first."""
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "logs").mkdir(exist_ok=True)
    token_file, token = run_dir / ".doctor-token", secrets.token_hex(16)
    token_file.write_text(token)
    return [
        sys.executable, "-m", PROBE, "--master", master, "--port", str(port),
        "--nnodes", str(nnodes), "--token-file", str(token_file), "--token", token,
        "--wait", str(PROBE_WAIT), *checklist.args(),
    ]  # fmt: skip


@dataclasses.dataclass(frozen=True)
class _Gang(Gang):
    """A doctor's gang as a launch: the collective test's ranks under torchrun's agents, as
    ``noderun run`` starts them, or ``command`` (the probe) as each node's own, in the agent's
    place: no torch imported, no rendezvous held (the probe's port test is the rendezvous)."""

    command: tuple[str, ...] = ()

    def agent_argv(self, node_rank: int) -> list[str]:
        return list(self.command) or super().agent_argv(node_rank)


@dataclasses.dataclass(frozen=True)
class _ProbeStep(StepPlan):
    """The probes as one srun step (one task per node): the probe itself, without the node
    entry, whose check-in gate would take the port the probe tests."""

    command: tuple[str, ...] = ()

    def node_argv(self) -> list[str]:
        return list(self.command)


def _gang(
    run_dir: Path, nnodes: int, nproc: int, master: str, port: int, probe: Sequence[str] = ()
) -> _Gang:
    """The collective test (or, given its argv, the probe) as a launch: its logs under
    ``run_dir/collective`` (``run_dir/probe``)."""
    script = PROBE if probe else COLLECTIVE
    return _Gang(
        nnodes=nnodes,
        nproc_per_node=nproc,
        master_addr=master,
        master_port=port,
        run_dir=run_dir / script.rsplit(".", 1)[1],
        script=script,
        entry=Entry.MODULE,
        command=tuple(probe),
    )


def _on_every_node(plan: LaunchPlan | StepPlan, log: Path) -> tuple[str, str]:
    """Run a gang with the launch backends' supervisors (their start, teardown, logs and first
    failure), cancelled after ``STEP_TIMEOUT`` (a lost node hangs it). Its whole output (the
    console, then each node's own command's) is kept in ``log``; returned with why the gang
    went wrong ('' when it did not)."""
    with open(log, "w") as console:
        gang: LocalSupervisor | StepSupervisor
        if isinstance(plan, StepPlan):
            gang = StepSupervisor(plan, console)
        else:
            gang = LocalSupervisor(plan, console)
        timer = threading.Timer(STEP_TIMEOUT, gang.cancel)
        timer.daemon = True
        began = time.monotonic()
        gang.start()
        timer.start()
        try:
            result = gang.wait()
        finally:
            timer.cancel()
        for agent in sorted((plan.run_dir / "logs").glob("node*.agent.log")):
            console.write(agent.read_text(errors="replace"))
    why = (
        f"timed out after {STEP_TIMEOUT:.0f} s" if time.monotonic() - began >= STEP_TIMEOUT else ""
    )
    return log.read_text(errors="replace"), result.failure.summary if result.failure else why


def _checked(
    mode: str,
    hosts: Sequence[str],
    probes: LaunchPlan | StepPlan,
    port: int,
    run_dir: Path,
    collective_plan: Callable[[int], LaunchPlan | StepPlan],
) -> DoctorResult:
    """Every node's probe, their checks, then the collective test, planned on the port the
    master's probe found spare (its result is rank 0's)."""
    began = time.monotonic()
    text, why = _on_every_node(probes, run_dir / "logs" / "doctor-probe.log")
    found, probe_sec = _marked(text, PROBE_MARKER), time.monotonic() - began
    checks = node_checks(found, list(hosts), why)
    master = next((p for p in found if p.get("is_master")), {})
    spare = (master.get("port") or {}).get("spare") or port + 1
    log = run_dir / "logs" / "doctor-collective.log"
    text, why = _on_every_node(collective_plan(spare), log)
    collective = next(iter(_marked(text, COLLECTIVE_MARKER)), None)
    error = "" if collective else f"{(why or 'no result')[:300]} (log: {log})"
    checks.append(NodeCheck("all", collective_check(collective, error)))
    steps = {"probe": probe_sec, "collective": time.monotonic() - began - probe_sec}
    seconds = {name: round(value, 2) for name, value in steps.items()}
    return DoctorResult(mode, list(hosts), checks, collective, str(run_dir), step_seconds=seconds)


def run_local(run_dir: Path, nproc: int, checklist: Checklist = Checklist()) -> DoctorResult:
    """This machine: one probe, and a collective test over ``nproc`` local ranks."""
    host, port = socket.gethostname(), free_port()
    env = {**job_token(os.environ), TASKS: str(nproc)}
    probes = plan_local(
        _gang(run_dir, 1, 1, host, port, _probe_argv(run_dir, host, port, 1, checklist)), env
    )

    def ranks(spare: int) -> LaunchPlan:  # one torchrun agent, as `noderun run` starts it here
        return plan_local(_gang(run_dir, 1, nproc, "127.0.0.1", spare))

    return _checked("local", [host], probes, port, run_dir, ranks)


def run_in_allocation(
    run_dir: Path, nproc: int, environ: Mapping[str, str], checklist: Checklist = Checklist()
) -> DoctorResult:
    """Inside sbatch/salloc: one probe per node in one srun step, then the collective step.
    The master probe's port admits only this job's probes: the job's token (noderun submit
    gave it one), else a new one for the step; srun hands it to every probe in its
    environment, never on a command line (``StepSupervisor``)."""
    slurm.require_command("srun")
    job = environ["SLURM_JOB_ID"]
    hosts = slurm.hostnames(environ.get("SLURM_JOB_NODELIST", ""))
    if not hosts:
        raise UsageError(f"job {job} has no node list", "run inside sbatch or salloc")
    n, port = len(hosts), port_for_job(job)
    probes = _ProbeStep(
        mode=LaunchMode.SRUN,  # one task per node: a rank of nproc_per_node 1
        nnodes=n,
        nproc_per_node=1,
        run_dir=run_dir / "probe",
        script=PROBE,
        entry=Entry.MODULE,
        master_port=port,
        hosts=tuple(hosts),
        wait_seconds=60,
        env=((TASKS, str(nproc)),),
        command=tuple(_probe_argv(run_dir, hosts[0], port, n, checklist)),
    )

    def ranks(spare: int) -> StepPlan:  # one task per rank, as `noderun run` starts them in a job
        return StepPlan(
            mode=LaunchMode.SRUN,
            nnodes=n,
            nproc_per_node=nproc,
            run_dir=run_dir / "collective",
            script=COLLECTIVE,
            entry=Entry.MODULE,
            join_timeout=30.0,
            master_port=spare,
            hosts=tuple(hosts),
        )

    return _checked(f"slurm job {job}", hosts, probes, port, run_dir, ranks)


def run_over_ssh(
    hosts: Sequence[str],
    run_dir: Path,
    nproc: int,
    ssh_config: str | None,
    checklist: Checklist = Checklist(),
) -> DoctorResult:
    """Plain SSH hosts: the launch checks, one probe per host at once, then the collective
    test, both as ``noderun run --hosts`` starts a launch (one command per host over ssh)."""
    from noderun.backends import ssh
    from noderun.plan.ssh import SSH_GUARD, forwarded_env, plan_ssh

    cwd, python, n = os.getcwd(), sys.executable, len(hosts)
    port = ssh.preflight(hosts, cwd, python, SSH_GUARD, None, ssh_config)  # one line per problem
    # the master probe's port admits only this doctor's probes: the job's token (the caller's
    # NODERUN_JOB_TOKEN, else a new one) travels, as every variable here, on the connection
    # itself (the first line of ssh_guard.py's stdin), never on the ssh command line; the
    # probes and ranks need none of the caller's secrets (HF_TOKEN, WANDB_API_KEY…): they stay
    forwarded = {k: v for k, v in forwarded_env(os.environ).items() if not is_secret(k)}
    job = RankContract.from_env(os.environ).job_token or secrets.token_hex(16)
    env = {**forwarded, **RankContract(job_token=job).to_env(), TASKS: str(nproc)}

    def launch(gang: Gang) -> LaunchPlan:
        return plan_ssh(gang, hosts, cwd=cwd, guard=SSH_GUARD, env=env, ssh_config=ssh_config)

    def agents(spare: int) -> LaunchPlan:  # one torchrun agent per host, as `noderun run --hosts`
        return launch(_gang(run_dir, n, nproc, hosts[0], spare))

    probes = launch(
        _gang(run_dir, n, 1, hosts[0], port, _probe_argv(run_dir, hosts[0], port, n, checklist))
    )
    try:
        return _checked(f"ssh hosts {','.join(hosts)}", hosts, probes, port, run_dir, agents)
    finally:
        ssh.close_connections(hosts, ssh_config)


def run_hand_started(
    nnodes: int,
    node_rank: int,
    master: str,
    port: int,
    run_dir: Path,
    checklist: Checklist = Checklist(),
    wait: float = HAND_WAIT,
) -> DoctorResult:
    """One of ``nnodes`` machines started by hand: probe here, swap facts through node 0
    (``doctor/exchange.py``), judge every node; no collective test (nothing starts ranks)."""
    from noderun.doctor import exchange
    from noderun.doctor.probe import run_probe

    (run_dir / "logs").mkdir(parents=True, exist_ok=True)
    swap_port = exchange.exchange_port(port)
    listener = None
    if node_rank == 0:  # listening before the probe: early nodes' reports wait in the backlog
        try:
            listener = exchange.listen(swap_port)
        except OSError as err:
            raise UsageError(
                f"port {swap_port} (the doctor's, after the master port {port}) is taken here: "
                f"{err.strerror}",
                "pass another --master-port on every node",
            ) from None
    script, paths = checklist.script, checklist.paths
    mine = run_probe(master, port, nnodes, None, "", wait, script, paths, is_master=node_rank == 0)
    if listener is not None:
        with listener:
            everyone = exchange.gather(listener, nnodes, mine, wait)
    else:
        everyone = exchange.report(master, swap_port, node_rank, mine, wait)
    probes = [everyone[rank] for rank in sorted(everyone)]
    hosts = [str(f.get("host")) for f in probes]
    checks = node_checks(probes, hosts)
    absent = [rank for rank in range(nnodes) if rank not in everyone]
    for rank in absent:
        start = f"noderun doctor --nnodes {nnodes} --node-rank {rank} --master-addr {master}"
        checks.append(
            NodeCheck(
                f"node {rank}",
                failed(
                    "probe",
                    f"node {rank} did not report to node 0 ({master}:{swap_port}) within "
                    f"{wait:.0f} s",
                    f"run `{start}` on that machine within {wait:.0f} s of the others",
                ),
            )
        )
    checks.append(
        NodeCheck(
            "all",
            skipped("collective", "not run across nodes started by hand: `noderun run` them"),
        )
    )
    nodes = [*hosts, *(f"node {rank}" for rank in absent)]
    mode = f"node {node_rank} of {nnodes} started by hand, master {master}:{port}"
    return DoctorResult(mode, nodes, checks, None, str(run_dir))


def batch_plan(
    nodes: int,
    nproc: int,
    run_dir: Path,
    partition: str | None,
    checklist: Checklist = Checklist(),
) -> SbatchPlan:
    """The job of ``--submit`` (plan/sbatch.py renders it): noderun doctor in the allocation."""
    return SubmitRequest(
        script="noderun-doctor",
        run_dir=run_dir,
        workdir=Path.cwd(),
        nodes=nodes,
        nproc_per_node=nproc,
        mode=LaunchMode.SRUN,  # one task per rank: doctor's collective step uses them all
        partition=partition,
        time="00:10:00",
        job_name="noderun-doctor",
        command=tuple(_doctor_args(run_dir, nproc, checklist)),
    ).materialize()


def _doctor_args(run_dir: Path, nproc: int, checklist: Checklist) -> list[str]:
    return [
        "doctor", "--run-dir", str(run_dir), "--nproc-per-node", str(nproc),
        "--result-file", str(run_dir / RESULT_FILE), *checklist.args(),
    ]  # fmt: skip


def submit(
    nodes: int,
    nproc: int,
    run_dir: Path,
    partition: str | None,
    checklist: Checklist = Checklist(),
) -> DoctorResult:
    """sbatch the doctor, wait for the job, read back its result."""
    # refuses bad input before any I/O
    plan = batch_plan(nodes, nproc, run_dir, partition, checklist)
    part = slurm.pick_partition(partition, slurm.partitions())
    if nodes > part.nodes:  # sbatch would accept it and the job would pend forever
        raise UsageError(
            f"--nodes {nodes} but partition {part.name} has {part.nodes} node(s)",
            f"use --nodes <= {part.nodes} or another --partition",
        )
    (run_dir / "logs").mkdir(parents=True, exist_ok=True)
    script = run_dir / "doctor.sbatch"
    script.write_text(str(plan))
    job = slurm.sbatch(script)
    print(f"noderun: doctor submitted as job {job} on {nodes} node(s); waiting", file=sys.stderr)
    state = slurm.wait_for_job(job)
    result = run_dir / RESULT_FILE
    if not result.is_file():
        raise UsageError(
            f"doctor job {job} ended {state.state} without a result",
            f"see {run_dir / 'logs'} (or `noderun explain {job}`)",
        )
    return DoctorResult.from_dict(json.loads(result.read_text()))
