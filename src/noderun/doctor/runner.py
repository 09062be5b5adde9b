"""Run the probes (locally, or one per node through srun) and the collective test; aggregate.

``noderun doctor --submit`` renders a small sbatch script that runs ``noderun doctor`` inside
the allocation and writes its JSON result into the run directory, then waits for it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from noderun import proc_guard
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
COLLECTIVE = "noderun.doctor.collective"  # run as a module by every rank


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


def _write_token(run_dir: Path) -> tuple[Path, str]:
    """The shared-filesystem token: written here (node 0), read by every probe."""
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "logs").mkdir(exist_ok=True)
    token = secrets.token_hex(16)
    path = run_dir / ".doctor-token"
    path.write_text(token)
    return path, token


def _probe_argv(
    master: str, port: int, nnodes: int, token_file: Path, token: str, checklist: Checklist
) -> list[str]:
    return [
        sys.executable, "-m", "noderun.doctor.probe", "--master", master, "--port", str(port),
        "--nnodes", str(nnodes), "--token-file", str(token_file), "--token", token,
        "--wait", str(PROBE_WAIT), *checklist.args(),
    ]  # fmt: skip


def _run(
    argv: Sequence[str], env: Mapping[str, str], log: Path, stdin_line: str | None = None
) -> tuple[int, str]:
    """Run a step, keep its whole output in ``log`` (for `noderun explain`), return it.
    ``stdin_line``: the first line of its stdin (ssh_guard.py's environment); that stdin stays
    open until the step ends (the guard ends its command when it closes)."""
    pipe = os.pipe() if stdin_line is not None else None
    try:
        if pipe is not None:
            os.write(pipe[1], (stdin_line or "").encode())  # a pipe holds far more than a line
        done = subprocess.run(
            list(argv),
            env=dict(env),
            stdin=pipe[0] if pipe is not None else None,
            capture_output=True,
            text=True,
            timeout=STEP_TIMEOUT,
            preexec_fn=proc_guard.die_with_parent_hook(),  # a killed doctor leaves no probe
        )
    except subprocess.TimeoutExpired as err:
        partial = [
            o.decode(errors="replace") if isinstance(o, bytes) else o or ""
            for o in (err.stdout, err.stderr)
        ]
        text = "".join(partial) + f"\ntimed out after {STEP_TIMEOUT:.0f} s"
        log.write_text(text)
        return 124, text
    finally:
        for fd in pipe or ():
            os.close(fd)
    log.write_text(done.stdout + done.stderr)
    return done.returncode, done.stdout + done.stderr


def _srun(
    options: Sequence[str], argv: Sequence[str], env: Mapping[str, str], log: Path
) -> tuple[int, str]:
    """A step through the SLURM client, its whole output kept in ``log``."""
    step = slurm.run_step(options, argv, env, STEP_TIMEOUT)
    log.write_text(step.text)
    return step.code, step.text


def _collective(plan: LaunchPlan | StepPlan, log: Path) -> tuple[Any, str]:
    """Run the collective test's gang with the launch backends' supervisors (their start,
    teardown, logs and first failure), its console (``node:rank|`` lines) kept in ``log``;
    rank 0's result, else why not. Cancelled after ``STEP_TIMEOUT``: a lost node hangs it."""
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
    text = log.read_text(errors="replace")
    results = _marked(text, COLLECTIVE_MARKER)
    if results:
        return results[0], ""
    ran = time.monotonic() - began
    why = f"timed out after {STEP_TIMEOUT:.0f} s" if ran >= STEP_TIMEOUT else "no result"
    why = result.failure.summary if result.failure else why
    return None, f"{why[:300]} (log: {log})"


def _gang(run_dir: Path, nnodes: int, nproc: int, master: str, port: int, python: str) -> Gang:
    """The collective test as a launch: its ranks' logs under ``run_dir/collective``."""
    return Gang(
        nnodes=nnodes,
        nproc_per_node=nproc,
        master_addr=master,
        master_port=port,
        run_dir=run_dir / "collective",
        script=COLLECTIVE,
        python=python,
        entry=Entry.MODULE,
    )


def _checked(
    mode: str,
    hosts: Sequence[str],
    text: str,
    port: int,
    run_dir: Path,
    began: float,
    collective_plan: Callable[[int], LaunchPlan | StepPlan],
) -> DoctorResult:
    """The probes' checks (``text``: their output), then the collective test, planned on the
    port the master's probe found spare."""
    probe_sec = time.monotonic() - began
    probes = _marked(text, PROBE_MARKER)
    checks = node_checks(probes, list(hosts))
    master = next((p for p in probes if p.get("is_master")), {})
    spare = (master.get("port") or {}).get("spare") or port + 1
    log = run_dir / "logs" / "doctor-collective.log"
    collective, error = _collective(collective_plan(spare), log)
    checks.append(NodeCheck("all", collective_check(collective, error)))
    steps = {"probe": probe_sec, "collective": time.monotonic() - began - probe_sec}
    seconds = {name: round(value, 2) for name, value in steps.items()}
    return DoctorResult(mode, list(hosts), checks, collective, str(run_dir), step_seconds=seconds)


def run_local(run_dir: Path, nproc: int, checklist: Checklist = Checklist()) -> DoctorResult:
    """This machine: one probe, and a collective test over ``nproc`` local ranks."""
    token_file, token = _write_token(run_dir)
    host, port = socket.gethostname(), free_port()
    env = {**os.environ, **job_token(os.environ), "NODERUN_DOCTOR_TASKS_PER_NODE": str(nproc)}
    began = time.monotonic()
    argv = _probe_argv(host, port, 1, token_file, token, checklist)
    _, text = _run(argv, env, run_dir / "logs" / "doctor-probe.log")

    def ranks(spare: int) -> LaunchPlan:  # one torchrun agent, as `noderun run` starts it here
        return plan_local(_gang(run_dir, 1, nproc, "127.0.0.1", spare, sys.executable))

    return _checked("local", [host], text, port, run_dir, began, ranks)


def run_in_allocation(
    run_dir: Path, nproc: int, environ: Mapping[str, str], checklist: Checklist = Checklist()
) -> DoctorResult:
    """Inside sbatch/salloc: one probe per node in one srun step, then the collective step."""
    slurm.require_command("srun")
    job = environ["SLURM_JOB_ID"]
    hosts = slurm.hostnames(environ.get("SLURM_JOB_NODELIST", ""))
    if not hosts:
        raise UsageError(f"job {job} has no node list", "run inside sbatch or salloc")
    n, port = len(hosts), port_for_job(job)
    token_file, token = _write_token(run_dir)
    # the exchange on node 0 admits only this job's reports: the job's token (noderun submit
    # gave it one), else a new one for this doctor; srun hands it to every probe in its
    # environment, never on a command line
    env = {**environ, **job_token(environ), "NODERUN_DOCTOR_TASKS_PER_NODE": str(nproc)}
    # --label: srun keeps each task's lines whole (unlabelled output of tasks can interleave)
    step = ["--label", f"--nodes={n}", f"--ntasks={n}", "--ntasks-per-node=1", "--wait=60"]
    began = time.monotonic()
    _, text = _srun(
        step,
        _probe_argv(hosts[0], port, n, token_file, token, checklist),
        env,
        run_dir / "logs" / "doctor-probe.log",
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

    return _checked(f"slurm job {job}", hosts, text, port, run_dir, began, ranks)


def run_over_ssh(
    hosts: Sequence[str],
    run_dir: Path,
    nproc: int,
    ssh_config: str | None,
    checklist: Checklist = Checklist(),
) -> DoctorResult:
    """Plain SSH hosts: the launch checks, one probe per host at once, then the collective
    test as ``noderun run --hosts`` would start it (one torchrun agent per host)."""
    import concurrent.futures

    from noderun.backends import ssh
    from noderun.plan.ssh import SSH_GUARD, forwarded_env, plan_ssh, remote_command, ssh_argv

    cwd, python, n = os.getcwd(), sys.executable, len(hosts)
    port = ssh.preflight(hosts, cwd, python, SSH_GUARD, None, ssh_config)  # one line per problem
    token_file, token = _write_token(run_dir)
    # the master probe's port admits only this doctor's probes: the job's token (the caller's
    # NODERUN_JOB_TOKEN, else a new one) travels, as every variable here, on the connection
    # itself (the first line of ssh_guard.py's stdin), never on the ssh command line; the
    # probes need none of the caller's secrets (HF_TOKEN, WANDB_API_KEY…): they stay here
    forwarded = {k: v for k, v in forwarded_env(os.environ).items() if not is_secret(k)}
    job = RankContract.from_env(os.environ).job_token or secrets.token_hex(16)
    env = {
        **forwarded,
        **RankContract(job_token=job).to_env(),
        "NODERUN_DOCTOR_TASKS_PER_NODE": str(nproc),
    }

    def probe_on(host: str) -> tuple[int, str]:
        remote = remote_command(probe_argv, {}, cwd, python, SSH_GUARD)
        argv = ssh_argv(host, remote, config=ssh_config)
        return _run(argv, os.environ, probe_log, stdin_line=json.dumps(env) + "\n")

    began = time.monotonic()
    probe_argv = _probe_argv(hosts[0], port, n, token_file, token, checklist)
    probe_log = run_dir / "logs" / "doctor-probe.log"
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(n, 32)) as pool:
        text = "".join(out for _, out in pool.map(probe_on, hosts))
    probe_log.write_text(text)

    def agents(spare: int) -> LaunchPlan:  # one torchrun agent per host, as `noderun run --hosts`
        gang = _gang(run_dir, n, nproc, hosts[0], spare, python)
        # the ranks' variables (the job token with them) go on the connection, as the probes'
        return plan_ssh(gang, hosts, cwd=cwd, guard=SSH_GUARD, env=env, ssh_config=ssh_config)

    try:
        return _checked(f"ssh hosts {','.join(hosts)}", hosts, text, port, run_dir, began, agents)
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
