"""Fault table: a lab node lost mid-job (its slurmd killed, and with it the job's slurmstepd and
ranks there: what a node crash does to a job). The job ends naming that node, not the peer whose
rank then lost its connection, and the same command resumes from the last checkpoint.

Killing slurmd alone changes nothing for a running step (slurmstepd carries it on); the job
would only end when slurmctld sets the node DOWN, SlurmdTimeout (60 s in the lab) plus a ping
interval later, which is also what a crash looks like from the controller. So the test does
what a crash does on the node: SIGKILL its slurmd and this job's slurmstepd and processes
there (found by the node's UTS namespace, up.sh's record of it, and the job id; other jobs on
that node keep their processes). Then srun sees its task there never end: it waits --wait=30 s
and KillWait, gives up, and the launcher names the node (about 40 s after the kill). The
node's slurmd is started again in ``finally`` (as up.sh starts it), up.sh's pid record is
updated and the node resumed if slurmctld set it DOWN meanwhile, so the shared lab stays whole.

Seen failing before slurm_step named lost nodes: the job's last line was "node 0 on node1
failed: Exited with exit code 1", the survivor.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from noderun.backends import slurm
from tests.conftest import ROOT, SCRIPTS, clean_env, wait_until
from tests.slurm.lab import read_json, require_lab

pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.soak]  # ~90 s: srun's --wait

LAB = Path(os.environ.get("NODERUN_LAB_DIR", "/tmp/noderun-slurm-lab"))


def _uts(pid: int | str) -> str | None:
    with contextlib.suppress(OSError):
        return os.readlink(f"/proc/{pid}/ns/uts")
    return None


def _job_processes_on(node: str, job_id: str) -> list[int]:
    """The node's slurmd, and this job's slurmstepd and processes on that node."""
    slurmd = (LAB / "pids" / f"slurmd-{node}.pid").read_text().strip()
    namespace = _uts(slurmd)
    found = [int(slurmd)]
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or entry.name == slurmd or _uts(entry.name) != namespace:
            continue
        with contextlib.suppress(OSError):
            argv = (entry / "cmdline").read_bytes()
            environ = (entry / "environ").read_bytes()
            if argv.startswith(f"slurmstepd: [{job_id}.".encode()) or (
                f"\0SLURM_JOB_ID={job_id}\0".encode() in b"\0" + environ
            ):
                found.append(int(entry.name))
    return found


def _node_state(node: str) -> str:
    out = subprocess.run(["sinfo", "-h", "-n", node, "-o", "%t"], capture_output=True, text=True)
    return out.stdout.strip()


def _restore(node: str) -> None:
    """slurmd of ``node`` running again as up.sh starts it, recorded where down.sh reads it,
    and the node back in service."""
    pid_file = LAB / "pids" / f"slurmd-{node}.pid"
    if _uts(pid_file.read_text().strip()) is None:
        own = LAB / "run" / f"slurmd-{node}.pid"
        own.unlink(missing_ok=True)
        subprocess.run(
            ["unshare", "--uts", "sh", "-c", f"hostname {node} && exec slurmd -N {node}"],
            check=True,
        )
        assert wait_until(lambda: own.exists() and own.read_text().strip(), 20), "no slurmd"
        pid = own.read_text().strip()
        pid_file.write_text(pid + "\n")
        (LAB / "pids" / f"slurmd-{node}.uts").write_text(f"{_uts(pid)}\n")
    if wait_until(lambda: "*" not in _node_state(node), 30, 0.5) and "down" in _node_state(node):
        subprocess.run(["scontrol", "update", f"nodename={node}", "state=resume"], check=False)
    assert wait_until(lambda: _node_state(node) in ("idle", "mix", "alloc"), 60, 0.5), (
        f"{node} stays {_node_state(node)} after the test"
    )


def _submit(run_dir: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "noderun", "submit", "--wait", "--exclusive", "--nodes", "2",
         "--nproc-per-node", "1", "--time", "5", "--run-dir", str(run_dir),
         str(SCRIPTS / "step_trainer.py"), "--resume", "auto", "--max-steps", "24",
         "--step-sleep", "0.5"],
        cwd=ROOT, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


@pytest.mark.timeout(900)  # two jobs on a shared lab: each may queue behind other lanes' jobs
def test_a_lost_node_ends_the_job_naming_it_and_the_job_resumes(tmp_path: Path) -> None:
    require_lab()
    if os.geteuid() != 0 or not (LAB / "pids").is_dir():
        pytest.skip(f"needs root and the lab's records under {LAB} (it kills and restarts slurmd)")
    run_dir = tmp_path / "run"
    first = _submit(run_dir)
    victim = None
    try:
        checkpoint = run_dir / "checkpoints" / "step-00000004"
        assert wait_until(checkpoint.exists, 240, 0.2), "no checkpoint at step 4"
        record = read_json(run_dir / "run.json")
        job_id, victim = str(record["job_id"]), record["hosts"][1]  # not the batch host
        doomed = _job_processes_on(victim, job_id)
        assert len(doomed) >= 3, doomed  # slurmd, the step's slurmstepd, its torchrun, a rank
        killed = time.monotonic()
        for pid in doomed:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        out, err = first.communicate(timeout=240)
        detected = time.monotonic() - killed
    finally:
        if first.poll() is None:
            first.kill()
        if victim is not None:
            _restore(victim)
    assert first.returncode == 1, out + err
    last = err.strip().splitlines()[-1]
    assert f"node 1 on {victim} was lost" in last, err[-3000:]
    assert detected < 120, f"the job ended {detected:.0f} s after the node was lost"
    record = read_json(run_dir / "run.json")
    assert record["status"] == "failed" and victim in record["failure"]["reason"], record
    assert slurm.job_state(job_id) is not None

    again = _submit(run_dir)
    out, err = again.communicate(timeout=400)
    assert again.returncode == 0, out[-2000:] + err[-2000:]
    log = (run_dir / "logs" / "rank0.log").read_text()
    resumed = re.search(r"noderun: resumed from \S+/step-(\d+) ", log)
    assert resumed and int(resumed.group(1)) >= 4, log[-3000:]
    assert (run_dir / "checkpoints" / "step-00000024").is_dir()
    print(f"node lost: the job ended {detected:.1f} s after the kill")
