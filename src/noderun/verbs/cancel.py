"""``noderun cancel RUN|JOB [--now]``: stop a run; by default every rank checkpoints first.

Graceful: ``cancel.json`` is written in the run directory, then the ranks get SIGUSR1 (the
preemption path: they agree on a step, save a checkpoint, exit 75; a SLURM job is not
requeued), and the launcher records the run as ``cancelled``, resumable with the same
command. ``--now`` (or a script that does not handle SIGUSR1, or a run that did not stop
within ``--grace``): the launcher is stopped (SIGTERM, it tears the gang down), or the SLURM
job scancelled. Then nothing of the run may be left running, and run.json is final.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from noderun.errors import NoderunError, UsageError
from noderun.verbs.options import OptionTable, positional, seconds, switch, value

if TYPE_CHECKING:
    from noderun.verbs.run_facts import Observed

STOP_WAIT = 60.0  # seconds for a launcher (or SLURM job) to end once told to stop at once
RECORD_WAIT = 10.0  # seconds for a SLURM job's run.json to say how it ended, once it ended

OPTIONS = OptionTable(
    "cancel",
    (
        positional("target", metavar="RUN|JOB", help="run directory, or a SLURM job id"),
        switch("--now", help="stop at once, without a checkpoint"),
        value(
            "--grace",
            type=seconds,
            default=120.0,
            help="seconds the ranks get to checkpoint and stop before they are stopped at once",
        ),
    ),
    help="cancel a run: every rank checkpoints, then it ends (--now: at once)",
    description="Cancel a running run (or the run of a SLURM job id), local, SSH or SLURM. "
    "By default every rank saves a checkpoint at the same step (SIGUSR1, as a preemption) "
    "and the run ends as `cancelled`; the same command continues it (with the script's "
    "--resume auto). --now stops it at once (the launcher tears the gang down; SLURM: "
    "scancel). A script that does not handle SIGUSR1 is stopped at once. Nothing of the "
    "run is left running; run.json ends `cancelled`. Exit 0 done, 1 something could not "
    "be stopped, 2 bad input (nothing is signalled).",
)


def main(args: argparse.Namespace) -> int:
    from noderun import cancel_request, run_view
    from noderun.verbs.run_facts import observe, resolve

    run_dir = resolve(args.target)
    seen = observe(run_dir)
    status = seen.status
    if status not in (*run_view.LIVE, "launcher died"):
        raise UsageError(
            f"run {run_dir} has already ended ({status}): there is nothing to cancel",
            "`noderun ls` lists the running ones; the same command continues a stopped run",
        )
    _refuse_other_host(seen)
    cancel_request.request(run_dir, now=args.now)
    graceful = not args.now and status != "pending"
    if seen.record.backend == "slurm" and seen.record.job_id:
        graceful = _cancel_job(seen, graceful, args.grace)
    else:
        graceful = _cancel_here(seen, graceful, args.grace)
    left = _leftovers(seen)
    final = _final_record(run_dir, graceful)
    if final == "completed":  # it reached its end before the request was acted on
        print(f"noderun: {run_dir} completed before the cancel took effect: nothing to continue")
        return 1 if left else 0
    saved = _latest_checkpoint(run_dir) if graceful else None
    how = f"every rank saved a checkpoint ({saved})" if saved else "stopped at once"
    print(
        f"noderun: cancelled {run_dir}: {how}; run.json says {final}; the same command "
        "continues it (the script's --resume auto)",
        flush=True,
    )
    if left:
        print(f"noderun: error: {left}", file=sys.stderr)
        return 1
    return 0


def _refuse_other_host(seen: Observed) -> None:
    """A local or SSH run is stopped through its launcher: it must run on this machine."""
    from noderun import rundir

    if seen.record.backend == "slurm":
        return
    holder = rundir.lock_holder(seen.run_dir)
    if holder and holder[1] != socket.gethostname() and seen.launcher == "alive":
        raise UsageError(
            f"the launcher of {seen.run_dir} runs on {holder[1]} (pid {holder[0]}), not here",
            f"run `noderun cancel` on {holder[1]}",
        )


def _cancel_here(seen: Observed, graceful: bool, grace: float) -> bool:
    """A local or SSH run: SIGUSR1 to its ranks, else (or then) SIGTERM to its launcher.
    True when the ranks stopped after a checkpoint."""
    from noderun import cancel_request, rundir

    holder = rundir.lock_holder(seen.run_dir)
    launcher = holder[0] if holder and seen.launcher == "alive" else None
    if graceful and launcher is not None:
        signalled = sum(len(answer.get("signalled", [])) for answer in _on_hosts(seen, "graceful"))
        if not signalled:
            _say("no rank handles SIGUSR1 (the script does not use noderun's preemption): "
                 "stopping it at once")  # fmt: skip
        else:
            _say(f"{signalled} rank(s) asked to checkpoint and stop (SIGUSR1); waiting up to "
                 f"{grace:g} s")  # fmt: skip
            if _wait(lambda: rundir.lock_owner(seen.run_dir) is None, grace):
                return True
            _say(f"the run did not stop within {grace:g} s (--grace): stopping it at once")
    cancel_request.request(seen.run_dir, now=True)
    if launcher is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(launcher, signal.SIGTERM)  # it tears the gang down and records the end
        if not _wait(lambda: rundir.lock_owner(seen.run_dir) is None, STOP_WAIT):
            with contextlib.suppress(ProcessLookupError):
                os.kill(launcher, signal.SIGKILL)
    return False


def _cancel_job(seen: Observed, graceful: bool, grace: float) -> bool:
    """A SLURM job: ``scancel --signal=USR1`` to its steps' tasks, then ``scancel``."""
    from noderun import cancel_request
    from noderun.backends import slurm

    job = str(seen.record.job_id)
    if graceful and not any((seen.run_dir / "logs").glob("rank*.progress")):
        _say("no rank uses noderun's runtime (SIGUSR1 would not checkpoint it): scancel")
        graceful = False
    if graceful:
        error = slurm.scancel(job, "USR1")
        if error:
            raise NoderunError(f"scancel --signal=USR1 {job} failed: {error}", "is slurmctld up?")
        _say(f"job {job}: its ranks asked to checkpoint and stop (SIGUSR1); waiting up to "
             f"{grace:g} s")  # fmt: skip
        if _wait(lambda: _job_ended(job), grace):
            return True
        _say(f"job {job} did not stop within {grace:g} s (--grace): scancel")
        cancel_request.request(seen.run_dir, now=True)
    error = slurm.scancel(job)
    if error:
        raise NoderunError(f"scancel {job} failed: {error}", "is slurmctld up?")
    _wait(lambda: _job_ended(job), STOP_WAIT)
    return False


def _job_ended(job: str) -> bool:
    from noderun.backends import slurm

    state = slurm.job_state(job)
    return state is None or state.final


def _on_hosts(seen: Observed, action: str) -> list[dict[str, list[int]]]:
    """``run_signal`` ``action`` here (a local run) or on every host of an SSH run."""
    from noderun.backends import run_signal

    if seen.record.backend != "ssh":
        if action == "graceful":
            return [run_signal.graceful(seen.run_dir)]
        return [{"killed": [run_signal.kill(seen.run_dir)]}]
    from noderun.plan.ssh import ssh_argv

    config = _ssh_config(seen.record.command or [])
    remote = [sys.executable, "-m", "noderun.backends.run_signal", str(seen.run_dir), action]
    nodes: dict[str, list[str]] = {}  # host -> its nodes (node rank = index in hosts)
    for node, host in enumerate(seen.record.hosts or []):
        nodes.setdefault(host, []).extend(["--node", str(node)])
    # every host at once: a rank signalled first agrees with its peers on a stop step about a
    # second later (preemption.CHECK_SEC), so a host asked one ssh round trip after another
    # could find its ranks already gone (and say none was asked)
    if not nodes:
        return []
    argvs = {h: ssh_argv(h, shlex.join([*remote, *its]), config=config) for h, its in nodes.items()}
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(len(nodes), 32)) as pool:
        answers = pool.map(lambda host: _ask_host(host, argvs[host]), nodes)
        return [answer for answer in answers if answer is not None]


def _ask_host(host: str, argv: list[str]) -> dict[str, list[int]] | None:
    """One host's ``run_signal`` answer over ssh (None, said, when it gave none)."""
    try:
        done = subprocess.run(
            argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60
        )
    except subprocess.TimeoutExpired:
        _say(f"host {host}: no answer over ssh within 60 s")
        return None
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        _say(f"host {host}: {(done.stderr.strip().splitlines() or ['no answer'])[-1]}")
        return None
    answer: dict[str, Any] = json.loads(lines[-1])
    if "killed" in answer:
        answer["killed"] = [answer["killed"]]
    return answer


def _ssh_config(command: list[str]) -> str | None:
    """``--ssh-config FILE`` of the run's command line."""
    for index, word in enumerate(command):
        if word.startswith(("--ssh-config=", "--ssh_config=")):
            return word.split("=", 1)[1]
        if word in ("--ssh-config", "--ssh_config") and index + 1 < len(command):
            return command[index + 1]
    return None


def _leftovers(seen: Observed) -> str | None:
    """Kill what is left of the run here (or on its SSH hosts); say what could not be."""
    if seen.record.backend == "slurm":
        from noderun.backends import slurm

        job = str(seen.record.job_id)
        state = slurm.job_state(job)
        if state is not None and not state.final:
            return f"job {job} is still {state.state}; `scancel {job}` again, or ask an admin"
        return None
    killed = sum(sum(a.get("killed", [])) for a in _on_hosts(seen, "kill"))
    if killed:
        _say(f"{killed} leftover process(es) of the run killed")
    if seen.record.backend != "ssh":
        from noderun.backends import run_signal

        if run_signal.run_processes(seen.run_dir):
            return f"processes of {seen.run_dir} are still running (kill -9 did not stop them)"
    return None


def _final_record(run_dir: Path, graceful: bool) -> str:
    """run.json's final status: the launcher's, or ``cancelled`` written here when the
    launcher could not (it died, or SLURM killed it first)."""
    from noderun import rundir
    from noderun.verbs.run_facts import read

    slurm_job = read(run_dir).backend == "slurm"
    # a local launcher has ended by now (it wrote run.json, or died); a SLURM job's launcher
    # writes run.json just before its job ends: a moment for the file system
    if _wait(lambda: read(run_dir).ended, RECORD_WAIT if slurm_job else 0.0):
        return read(run_dir).status
    try:
        rundir.take_lock(run_dir)
    except UsageError:
        return read(run_dir).status  # a live launcher still holds it: it writes the end
    try:
        record = read(run_dir)
        if not record.ended:
            record.status = "cancelled"
            record.end_time = rundir.now_iso()
            record.interrupted_by = "noderun cancel" + ("" if graceful else " --now")
            rundir.write_record(run_dir, record)
        return record.status
    finally:
        rundir.release_lock(run_dir)


def _latest_checkpoint(run_dir: Path) -> Path | None:
    """The newest complete checkpoint (``.complete`` written last), without importing torch."""
    done = [p.parent for p in (run_dir / "checkpoints").glob("*/.complete")]
    return max(done, key=lambda p: p.stat().st_mtime, default=None)


def _wait(condition: Callable[[], bool], limit: float, poll: float = 0.2) -> bool:
    deadline = time.monotonic() + limit
    while not condition():
        if time.monotonic() >= deadline:
            return False
        time.sleep(poll)
    return True


def _say(text: str) -> None:
    print(f"noderun: {text}", file=sys.stderr, flush=True)
