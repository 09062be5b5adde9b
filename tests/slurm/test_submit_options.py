"""Any sbatch option through `noderun submit`, checked by `sbatch --test-only` first, on the
real lab: first-class flags, --sbatch-arg pass-through, and the [submit] table of noderun.toml."""

from __future__ import annotations

import secrets
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from noderun import rundir
from tests.conftest import SCRIPTS, clean_env, noderun
from tests.slurm.lab import job_id_of, require_lab, wait

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
PLAIN = str(SCRIPTS / "plain_torch.py")


def _no_torch(tmp_path: Path) -> str:
    """A script whose ranks only print: these tests are about what reaches SLURM, and a rank
    that imports torch costs ~1.5 CPU-s on the shared lab for nothing they look at."""
    script = tmp_path / "says_hi.py"
    script.write_text("import os\nprint('hi from rank', os.environ['RANK'], flush=True)\n")
    return str(script)


def show_job(job_id: str) -> str:
    done = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_exclusive_and_a_passed_through_option_reach_slurm(tmp_path: Path) -> None:
    require_lab()
    mark = f"noderun-{secrets.token_hex(3)}"
    result = noderun(
        ["submit", "--nodes", "2", "--exclusive", f"--sbatch-arg=--comment={mark}",
         "--sbatch-arg=--mail-type=END", "--run-dir", str(tmp_path / "run"), _no_torch(tmp_path)],
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    job_id = job_id_of(result.stdout)
    shown = show_job(job_id)  # read while SLURM still holds the job
    assert f"Comment={mark}" in shown and "MailType=END" in shown
    assert "OverSubscribe=NO" in shown  # what --exclusive sets
    assert wait(job_id).state == "COMPLETED"
    # nobody follows this job: its launcher wrote the accounting before the job ended
    assert f"{job_id}.0" in (tmp_path / "run" / "sacct_summary.txt").read_text()
    record = rundir.read_record(tmp_path / "run")
    assert record is not None and record.follower is None


def test_a_follower_that_stops_leaves_the_accounting_to_the_launcher(tmp_path: Path) -> None:
    """`submit --wait` is named in the record as the follower (the launcher then leaves the
    accounting to it, so the job ends sooner); Ctrl-C says it stopped, and the launcher writes
    the accounting itself."""
    require_lab()
    script = tmp_path / "sleeper.py"
    script.write_text("import time\ntime.sleep(6)\nprint('slept', flush=True)\n")
    run_dir = tmp_path / "run"
    follower = subprocess.Popen(
        [sys.executable, "-m", "noderun", "submit", "--wait", "--nodes", "1",
         "--nproc-per-node", "1", "--time", "5", "--run-dir", str(run_dir), str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=clean_env(),
        # Ctrl-C as at a terminal: a suite started in the background (`make test &`) inherits
        # SIGINT ignored, and Python then raises no KeyboardInterrupt
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    assert follower.stdout is not None
    said = []
    for line in follower.stdout:
        said.append(line)
        if "RUNNING" in line:
            break
    record = rundir.read_record(run_dir)
    assert record is not None and record.follower is not None, "".join(said)
    assert record.follower.pid == follower.pid
    follower.send_signal(signal.SIGINT)
    rest, _ = follower.communicate(timeout=60)
    assert follower.returncode == 130, "".join(said) + rest
    assert "stopped following job" in rest
    assert "follow_stopped" in (run_dir / "logs" / "timeline.jsonl").read_text()
    job_id = job_id_of("".join(said))
    assert wait(job_id).state == "COMPLETED"
    summary = (run_dir / "sacct_summary.txt").read_text()
    # one node in torchrun mode runs no srun step: nothing to wait for (it waited 15 s for one)
    assert f"{job_id}.batch" in summary and "still arriving" not in summary, summary


def test_submit_table_of_noderun_toml_sets_cluster_defaults(tmp_path: Path) -> None:
    require_lab()
    mark = f"from-config-{secrets.token_hex(3)}"
    (tmp_path / "noderun.toml").write_text(
        f'[submit]\nexclusive = true\nsbatch_arg = ["--comment={mark}"]\n'
    )
    script = _no_torch(tmp_path)
    result = noderun(["submit", "--run-dir", str(tmp_path / "run"), script], cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    job_id = job_id_of(result.stdout)
    shown = show_job(job_id)
    assert f"Comment={mark}" in shown and "OverSubscribe=NO" in shown
    assert wait(job_id).state == "COMPLETED"


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--constraint", "nosuchfeature"], "Invalid feature specification"),
        (["--nodelist", "node9"], "Invalid node name specified"),
        (["--sbatch-arg=--mail-type=BOGUS"], "Invalid --mail-type specification"),
        (["--reservation", "nosuchreservation"], "reservation is invalid"),
    ],
)
def test_what_sbatch_would_refuse_is_one_line_and_nothing_is_submitted(
    tmp_path: Path, args: list[str], said: str
) -> None:
    require_lab()
    name = f"refused-{secrets.token_hex(3)}"
    run_dir = tmp_path / "run"
    result = noderun(
        ["submit", "--job-name", name, "--run-dir", str(run_dir), *args, PLAIN], cwd=tmp_path
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert said in result.stderr and "sbatch --test-only refused" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert not run_dir.exists()
    queued = subprocess.run(["squeue", "-h", "-n", name], capture_output=True, text=True)
    history = subprocess.run(["sacct", "-n", "-X", "--name", name], capture_output=True, text=True)
    assert queued.stdout.strip() == "" and history.stdout.strip() == ""
