"""``noderun submit``: render an sbatch script from options, submit it, optionally follow it."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

from noderun import disk_room, rundir, secret_env, timeline
from noderun.backends import slurm
from noderun.errors import UsageError
from noderun.plan.sbatch import SbatchPlan, SubmitRequest
from noderun.plan.slurm import DEFAULT_JOIN_TIMEOUT, LaunchMode
from noderun.run_record import FOLLOW_STOPPED, Follower, RunRecord
from noderun.topology.contract import job_token
from noderun.verbs.launch_json import JSON_OPTION
from noderun.verbs.options import (
    NOTIFY_OPTION,
    SCRIPT_ARGUMENTS,
    STALL_OPTIONS,
    OptionTable,
    env_pair,
    from_torchrun,
    port_number,
    positive_int,
    refuse_unless_applies,
    repeated,
    stall_policy,
    switch,
    value,
)
from noderun.verbs.profiling import PROFILE_OPTION, profile_env, report_profile
from noderun.verbs.torchrun_flags import (
    SUBMIT_TORCHRUN_OPTIONS,
    TorchrunFlags,
    check_program,
    nnodes_spec,
    nproc_spec,
    read_flags,
    run_dir_for,
)

SCRIPT_NAME = "job.sbatch"


OPTIONS = OptionTable(
    "submit",
    (
        from_torchrun(
            value(
                "--nodes",
                "--nnodes",
                type=nnodes_spec,
                default=1,
                help="nodes (N, or torchrun's N:N); --nnodes is the same option",
            ),
            "nnodes",
        ),
        from_torchrun(
            value(
                "--nproc-per-node",
                type=nproc_spec,
                default=1,
                help="ranks per node: a number, or gpu/auto (= --gpus-per-node)",
            )
        ),
        value("--mode", type=LaunchMode, default=LaunchMode.TORCHRUN, help="who starts the ranks"),
        value("--partition", help="partition (default: the cluster's default)"),
        value("--account", help="account to charge"),
        value("--time", help="time limit, e.g. 01:30:00"),
        value("--cpus-per-task", type=positive_int, default=1, help="CPUs per rank"),
        value("--mem", help="memory per node, e.g. 16G"),
        value("--gpus-per-node", type=positive_int, help="GPUs per node"),
        value("--job-name", help="job name (default: the script's name)"),
        repeated("--env", type=env_pair, metavar="K=V", help="export K=V in the job (repeatable)"),
        value("--setup", help="shell line(s) run before launch, e.g. 'source venv/bin/activate'"),
        switch("--requeue", help="let SLURM requeue the job"),
        value("--gres", help="generic resources per node, e.g. gpu:8 or gpu:a100:4"),
        switch("--exclusive", help="whole nodes, shared with no other job", env=True),
        value("--constraint", help="node features, e.g. a100 or 'ib&a100'"),
        value("--qos", help="quality of service"),
        value("--reservation", help="run in this reservation"),
        value("--exclude", help="nodes not to use, e.g. node[3-4]"),
        value("--nodelist", help="nodes to use, e.g. node[1-2]"),
        value("--dependency", help="start after other jobs, e.g. afterok:1234"),
        repeated(
            "--sbatch-arg",
            metavar="--OPT[=V]",
            env=True,
            help="any other sbatch option, as sbatch spells it (repeatable; a list "
            "`sbatch_arg = [...]` in [submit] of noderun.toml)",
        ),
        value("--signal", help="signal before the time limit, e.g. USR1@90"),
        value("--run-dir", type=Path, help="run directory on the shared filesystem"),
        from_torchrun(
            value("--master-port", type=port_number, help="rendezvous port (default: from job id)")
        ),
        value(
            "--join-timeout",
            type=float,
            default=DEFAULT_JOIN_TIMEOUT,
            help="seconds for every node/rank to arrive before the job fails",
        ),
        *STALL_OPTIONS,
        NOTIFY_OPTION,
        *SUBMIT_TORCHRUN_OPTIONS,
        PROFILE_OPTION,
        switch("--dry-run", help="print the script, submit nothing"),
        switch("--wait", help="follow the job; exit with its code"),
        JSON_OPTION,
        *SCRIPT_ARGUMENTS,
    ),
    help="submit a multi-node job to SLURM (sbatch), optionally follow it",
    description="Render an sbatch script (one srun step, `python -m noderun.node` per node, "
    "torchrun or one task per rank), submit it, print the job id and run directory. "
    "Arguments after SCRIPT go to the script, byte for byte.",
)


def submit_nproc(spec: int | str, gpus_per_node: int | None) -> int:
    """--nproc-per-node for a job not yet placed: gpu/auto are the GPUs asked for per node."""
    if isinstance(spec, int):
        return spec
    if spec in ("gpu", "auto") and gpus_per_node:
        return gpus_per_node
    raise UsageError(
        f"--nproc-per-node {spec}: the nodes are not known before the job starts",
        "pass a number, or --gpus-per-node N with --nproc-per-node gpu",
    )


def build_request(args: argparse.Namespace) -> SubmitRequest:
    flags: TorchrunFlags = read_flags(args)
    program = check_program(args.script, flags.entry)
    run_dir = run_dir_for(args, flags)
    rundir.reuse_or_refuse(run_dir, slurm.job_alive)  # a stopped run continues in place
    return SubmitRequest(
        script=program,
        run_dir=run_dir,
        workdir=Path.cwd(),
        script_args=tuple(args.script_args),
        nodes=args.nodes,
        nproc_per_node=submit_nproc(args.nproc_per_node, args.gpus_per_node),
        mode=LaunchMode(args.mode),
        partition=args.partition,
        account=args.account,
        time=args.time,
        cpus_per_task=args.cpus_per_task,
        mem=args.mem,
        gpus_per_node=args.gpus_per_node,
        job_name=args.job_name,
        env=(*args.env, *profile_env(args).items()),
        setup=args.setup,
        requeue=args.requeue,
        signal=args.signal,
        master_port=args.master_port,
        join_timeout=args.join_timeout,
        python=sys.executable,
        stall=stall_policy(args),
        entry=flags.entry,
        # the job's own `noderun run` notifies: it sees the end, a preemption, a stall
        run_flags=(*flags.run_argv(), *(f"--notify={t}" for t in args.notify)),
        gres=args.gres,
        exclusive=args.exclusive,
        constraint=args.constraint,
        qos=args.qos,
        reservation=args.reservation,
        exclude=args.exclude,
        nodelist=args.nodelist,
        dependency=args.dependency,
        sbatch_args=tuple(args.sbatch_arg),
    )


def check_cluster(request: SubmitRequest) -> None:
    """Partition, node count, CPUs and GPUs per node against what sinfo reports."""
    part = slurm.pick_partition(request.partition, slurm.partitions())
    if request.nodes > part.nodes:
        raise UsageError(
            f"--nodes {request.nodes} but partition {part.name} has {part.nodes} node(s)",
            f"use --nodes <= {part.nodes} or another --partition",
        )
    cpus = request.nproc_per_node * request.cpus_per_task
    if cpus > part.max_cpus:
        raise UsageError(
            f"--nproc-per-node {request.nproc_per_node} x --cpus-per-task "
            f"{request.cpus_per_task} = {cpus} CPUs per node, but nodes of partition "
            f"{part.name} have at most {part.max_cpus}",
            f"use --nproc-per-node <= {part.max_cpus // request.cpus_per_task}",
        )
    gpus = request.gpus_per_node or 0
    if gpus > part.max_gpus:
        raise UsageError(
            f"--gpus-per-node {gpus} but nodes of partition {part.name} have at most "
            f"{part.max_gpus} GPU(s)",
            "lower --gpus-per-node (and --nproc-per-node with it) or pick a GPU partition",
        )


def write_job(plan: SbatchPlan, followed: bool = False) -> Path:
    """The script and a ``submitted`` run.json, written before sbatch sees them; ``followed``:
    this process follows the job and writes its accounting (the record names it)."""
    run_dir = plan.request.run_dir
    (run_dir / "logs").mkdir(parents=True, exist_ok=True)  # sbatch --output needs it
    script = run_dir / SCRIPT_NAME
    script.write_text(str(plan))
    record = RunRecord(
        backend="slurm",
        status="submitted",
        command=secret_env.masked_argv(sys.argv),
        mode=plan.request.mode.value,
        sbatch_script=str(script),
        submit_time=rundir.now_iso(),
        follower=Follower.this_process() if followed else None,
    )
    previous = rundir.read_record(run_dir)
    rundir.write_record(run_dir, previous.continued_by(record) if previous else record)
    return script


def main(args: argparse.Namespace) -> int:
    if args.dry_run:
        refuse_unless_applies(args, ("wait",), "with --dry-run: no job is submitted to follow",
                              "drop one of them")  # fmt: skip
    plan = build_request(args).materialize()
    request = plan.request
    args.run_dir = request.run_dir  # --json reports it
    checks = (lambda: check_cluster(request)) if shutil.which("sinfo") else None
    if args.dry_run:
        if shutil.which("sbatch"):
            slurm.sbatch_test(str(plan), meanwhile=checks)
        elif checks is not None:
            checks()
        sys.stdout.write(plan.dry_run_text())
        return 0
    slurm.require_command("sbatch")
    if short := disk_room.shortfall(request.run_dir):
        print(f"noderun: warning: {short}", file=sys.stderr, flush=True)
    # a request SLURM would refuse: one line, nothing submitted (sinfo's checks first)
    slurm.sbatch_test(str(plan), meanwhile=lambda: check_cluster(request))
    created = not request.run_dir.exists()
    os.environ.update(job_token(os.environ))  # sbatch hands it to the job: its gate's token
    try:
        job_id = slurm.sbatch(write_job(plan, followed=args.wait))
    except BaseException:
        if created:  # nothing half-written: the run directory goes with the refused job
            shutil.rmtree(request.run_dir, ignore_errors=True)
        raise
    args.job_id = job_id  # --json reports it
    timeline.stamp(request.run_dir, "submit_started", "submit", at=timeline.process_start())
    timeline.stamp(request.run_dir, "submitted", "submit")
    print(f"noderun: submitted job {job_id}; run dir {request.run_dir}", flush=True)
    if not args.wait:
        return 0
    code = follow(job_id, request.run_dir, since=timeline.process_start())
    report_profile(request.run_dir, args)
    return code


class _Ending:
    """The job's launcher wrote its final run.json: the job ends in a moment. Cheap to ask
    often (a stat; the file is read again only when it changed)."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self._seen: int | None = None
        self._ended = False

    def __call__(self) -> bool:
        try:
            changed = (self.run_dir / rundir.RUN_JSON).stat().st_mtime_ns
        except OSError:
            return False
        if changed != self._seen:
            self._seen = changed
            try:
                record = rundir.read_record(self.run_dir)
            except (OSError, ValueError):
                return False
            self._ended = record is not None and record.status != "" and record.ended
        return self._ended


def follow(job_id: str, run_dir: Path, since: float = 0.0) -> int:
    """Print state changes and the job's console until it ends; return its exit code.
    run.json gets the job's whole timeline, from ``since`` (this command's start)."""
    console = run_dir / "logs" / f"slurm-{job_id}.out"
    offset = 0

    def copy_console() -> None:
        nonlocal offset
        try:
            with open(console, "rb") as handle:
                handle.seek(offset)
                data = handle.read()
        except OSError:
            return
        offset += len(data)
        if data:
            sys.stdout.write(data.decode(errors="replace"))
            sys.stdout.flush()

    def changed(state: slurm.JobState) -> None:
        if state.state == "RUNNING":
            timeline.stamp(run_dir, "job_running_seen", "submit")
        reason = f" ({state.reason})" if state.reason not in ("", "None") else ""
        print(f"noderun: job {job_id} {state.state}{reason}", file=sys.stderr, flush=True)

    try:
        final = slurm.wait_for_job(
            job_id, on_change=changed, on_poll=copy_console, ending=_Ending(run_dir)
        )
    except KeyboardInterrupt:
        # the record names this command as the follower: the launcher writes the accounting
        timeline.stamp(run_dir, FOLLOW_STOPPED, "submit")
        print(
            f"noderun: stopped following job {job_id}; it keeps running "
            f"(`scancel {job_id}` stops it); run dir {run_dir}",
            file=sys.stderr,
        )
        return 130
    timeline.stamp(run_dir, "job_end_seen", "submit")
    copy_console()
    record = rundir.read_record(run_dir) or RunRecord(backend="slurm", status="")
    if not record.ended:  # the job never got to say
        record.status, record.job_id = final.status, job_id
        record.exit_code = final.shell_exit_code
    code = final.shell_exit_code
    why = f": {record.failure.reason}" if code and record.failure else ""
    print(  # the result first; the accounting lands before this command returns
        f"noderun: job {job_id} {final.state}, exit code {code}{why}; run dir {run_dir}",
        file=sys.stderr if code else sys.stdout,
        flush=True,
    )
    slurm.write_sacct_summary(run_dir, job_id, job_final=True)
    timeline.stamp(run_dir, "accounting_written", "submit")
    if since:
        record.timeline = timeline.gather(run_dir, since)
    rundir.write_record(run_dir, record)
    return code
