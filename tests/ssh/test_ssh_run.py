"""`noderun run --hosts` against real sshd hosts (tests/ssh/lab.py): launch, verify, teardown,
one-line refusals, and arguments that cross the SSH boundary byte for byte."""

from __future__ import annotations

import json
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import (
    ROOT,
    SCRIPTS,
    cli,
    noderun,
    processes_of_run,
    processes_running,
    wait_until,
)
from tests.ssh.lab import PRIVATE, SshLab

pytestmark = [pytest.mark.slow, pytest.mark.ssh]
CLASSIFIER = ROOT / "examples" / "ddp_classifier.py"
HOSTS = "sshhost1,sshhost2"


def _ssh(lab: SshLab, *extra: str) -> list[str]:
    return ["run", "--hosts", HOSTS, "--ssh-config", str(lab.config), *extra]


def test_classifier_on_two_hosts_by_two_processes_is_healthy(
    ssh_lab: SshLab, tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    result = noderun(
        [*_ssh(ssh_lab, "--nproc-per-node", "2", "--run-dir", str(run_dir)), str(CLASSIFIER),
         "--epochs", "2"],
        cwd=ROOT,
        timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "sshhost1:0| epoch 2/2" in result.stdout, result.stdout[-2000:]
    record = json.loads((run_dir / "run.json").read_text())
    assert record["backend"] == "ssh" and record["hosts"] == ["sshhost1", "sshhost2"]
    assert record["remote_files"] == {"sshhost1": "shared", "sshhost2": "shared"}  # as-is
    assert "copied back" not in result.stdout
    runtime = json.loads((run_dir / "runtime.json").read_text())
    assert runtime["rank_hosts"] == ["sshhost1", "sshhost1", "sshhost2", "sshhost2"]
    verified = cli(["verify", str(run_dir)])
    assert verified.returncode == 0, verified.stdout
    assert not processes_of_run(run_dir, str(CLASSIFIER))


def test_hostfile_slots_and_a_plain_script(ssh_lab: SshLab, tmp_path: Path) -> None:
    hostfile = tmp_path / "hosts"
    hostfile.write_text("# two hosts\nsshhost1 slots=2\nsshhost2 slots=2  # the second\n")
    run_dir = tmp_path / "run"
    # plain_torch.py: no noderun import, one all_reduce over the 4 ranks of both hosts (no
    # DDP: its ranks would import torch._dynamo, ~1.2 CPU-s each, for nothing read here)
    result = noderun(
        ["run", "--hostfile", str(hostfile), "--ssh-config", str(ssh_lab.config), "--run-dir",
         str(run_dir), str(SCRIPTS / "plain_torch.py")],
        cwd=ROOT,
        timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    ranks = [line for line in result.stdout.splitlines() if "plain rank=" in line]
    assert len(ranks) == 4, result.stdout
    assert any(line.startswith("sshhost2:3|") for line in ranks), ranks


def test_a_killed_remote_rank_ends_everything_on_every_host(
    ssh_lab: SshLab, tmp_path: Path
) -> None:
    script = tmp_path / f"gang_{tmp_path.name}.py"
    shutil.copy(SCRIPTS / "gang.py", script)
    run_dir = tmp_path / "run"
    result = noderun(
        [*_ssh(ssh_lab, "--nproc-per-node", "2", "--env", "GANG_MODE=sigkill:3", "--run-dir",
               str(run_dir)), str(script)],
        cwd=ROOT,
        timeout=120,
    )  # fmt: skip
    ended = time.time()
    assert result.returncode == 1, result.stdout[-2000:] + result.stderr[-2000:]
    last = result.stderr.strip().splitlines()[-1]
    assert "rank 3 (node 1 on sshhost2, local rank 1) failed: killed by SIGKILL" in last, last
    killed_at = float((run_dir / "killed_at").read_text())
    assert ended - killed_at < 10, f"{ended - killed_at:.1f} s from the kill to the end"
    gone = wait_until(lambda: not processes_running(str(script)), timeout=1)
    assert gone, "a rank outlived the job on a host"
    explained = cli(["explain", str(run_dir)])  # names the host and rank, as locally
    expected = "  failed:   rank 3 (node 1 on sshhost2, local rank 1): killed by SIGKILL"
    assert explained.returncode == 1 and expected in explained.stdout, explained.stdout


def test_a_plain_script_rank_killed_on_the_second_host_is_named_not_its_peer(
    ssh_lab: SshLab, tmp_path: Path
) -> None:
    """No noderun import: rank 3 SIGKILLs itself, rank 2 on the same host dies of "Connection
    closed by peer" in the same second. torchrun's own root cause may pick rank 2."""
    script = tmp_path / f"plain_gang_{tmp_path.name}.py"
    shutil.copy(SCRIPTS / "plain_gang.py", script)
    run_dir = tmp_path / "run"
    result = noderun(
        [*_ssh(ssh_lab, "--nproc-per-node", "2", "--env", "PLAIN_MODE=sigkill:3", "--run-dir",
               str(run_dir)), str(script)],
        cwd=ROOT,
        timeout=120,
    )  # fmt: skip
    assert result.returncode == 1, result.stdout[-2000:] + result.stderr[-2000:]
    last = result.stderr.strip().splitlines()[-1]
    assert "rank 3 (node 1 on sshhost2, local rank 1) failed: killed by SIGKILL" in last, last
    assert json.loads((run_dir / "run.json").read_text())["failure"]["rank"] == 3
    explained = cli(["explain", str(run_dir)])
    expected = "  failed:   rank 3 (node 1 on sshhost2, local rank 1): killed by SIGKILL"
    assert explained.returncode == 1 and expected in explained.stdout, explained.stdout
    gone = wait_until(lambda: not processes_running(str(script)), timeout=1)
    assert gone, "a rank outlived the job on a host"


def test_ctrl_c_tears_down_every_host(ssh_lab: SshLab, tmp_path: Path) -> None:
    script = tmp_path / f"gang_{tmp_path.name}.py"
    shutil.copy(SCRIPTS / "gang.py", script)
    proc = subprocess.Popen(
        [sys.executable, "-m", "noderun", *_ssh(ssh_lab, "--run-dir", str(tmp_path / "run")),
         "--env", "GANG_MODE=hang", str(script)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while len(processes_running(str(script))) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(1)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, out[-1000:] + err[-1000:]
    gone = wait_until(lambda: not processes_running(str(script)), timeout=1)
    assert gone, "a rank outlived Ctrl-C on a host"


@pytest.mark.parametrize(
    ("hosts", "config", "expected"),
    [
        ("sshhost1,sshdown", "config", "host sshdown: ssh failed: ssh: connect to host sshdown"),
        ("sshhost1,sshhost2", "wrong_key_config", "host sshhost1: ssh failed: root@sshhost1: "),
    ],
)
def test_unreachable_host_or_wrong_key_is_one_line(
    ssh_lab: SshLab, tmp_path: Path, hosts: str, config: str, expected: str
) -> None:
    run_dir = tmp_path / "run"
    result = noderun(
        ["run", "--hosts", hosts, "--ssh-config", str(getattr(ssh_lab, config)), "--run-dir",
         str(run_dir), str(SCRIPTS / "plain_ddp.py")],
        cwd=ROOT,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], lines
    assert "hint:" in lines[0]
    assert not run_dir.exists()


def test_a_port_taken_on_the_master_host_is_one_line(ssh_lab: SshLab, tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("", 0))
        sock.listen()
        port = sock.getsockname()[1]
        taken = noderun(
            [*_ssh(ssh_lab, "--master-port", str(port), "--run-dir", str(tmp_path / "r1")),
             str(SCRIPTS / "plain_ddp.py")],
            cwd=ROOT,
        )  # fmt: skip
    assert taken.returncode == 2, taken.stderr
    assert f"port {port} is taken on the master host sshhost1" in taken.stderr
    assert len(taken.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "r1").exists()


def test_hostile_arguments_and_env_arrive_byte_for_byte(ssh_lab: SshLab, tmp_path: Path) -> None:
    hostile = ["a b", "$(touch /tmp/pwned)", "'\"; exit 3", "*", "", "--x=1;ls", "é\\n"]
    dump = tmp_path / "dump.py"
    dump.write_text(
        "import json, os, sys\n"
        "print('ARGS ' + json.dumps({'argv': sys.argv[1:], 'env': os.environ.get('WEIRD'),"
        " 'rank': os.environ['RANK']}), flush=True)\n"
    )
    weird = "x y $HOME `id` '\"\\"
    result = noderun(
        [*_ssh(ssh_lab, "--env", f"WEIRD={weird}", "--run-dir", str(tmp_path / "run")),
         str(dump), *hostile],
        cwd=ROOT,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    seen = [json.loads(line.split("ARGS ", 1)[1]) for line in result.stdout.splitlines()
            if "ARGS " in line]  # fmt: skip
    assert len(seen) == 2
    for entry in seen:
        assert entry["argv"] == hostile and entry["env"] == weird, entry
    assert not Path("/tmp/pwned").exists()


def test_dry_run_prints_each_hosts_command_and_asks_no_host(tmp_path: Path) -> None:
    result = noderun(
        ["run", "--hosts", "nohost-a,nohost-b", "--nproc-per-node", "2", "--dry-run",
         "--run-dir", str(tmp_path / "run"), str(SCRIPTS / "plain_ddp.py"), "x y"],
        cwd=ROOT,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    commands = [line for line in result.stdout.splitlines() if line.startswith("ssh ")]
    assert len(commands) == 2
    assert "nohost-a 'cd " in commands[0] and "--node-rank=1" in commands[1]
    assert "--master-addr=nohost-a" in commands[1] and "'\"'\"'x y'\"'\"'" in commands[0]
    assert not (tmp_path / "run").exists()


def test_doctor_over_ssh_probes_every_host_and_runs_the_collective(
    ssh_lab: SshLab, ssh_doctor: tuple[subprocess.CompletedProcess[str], Path, Path]
) -> None:
    """`noderun doctor --hosts sshhost1,sshhost2`: the lab's doctor run (tests/ssh/conftest.py,
    with --script and --check-path, whose checks test_ssh_checklist reads)."""
    result = ssh_doctor[0]
    report = json.loads(result.stdout)
    assert report["nodes"] == ["sshhost1", "sshhost2"], report
    by_check = {(c["node"], c["check"]): c["status"] for c in report["checks"]}
    for host in ("sshhost1", "sshhost2"):
        assert by_check[(host, "master-reachable")] == "PASS", report
        assert by_check[(host, "shared-fs")] == "PASS", report
    assert by_check[("sshhost1", "port-free")] == "PASS"
    assert by_check[("all", "collective")] == "PASS", report
    down = noderun(
        ["doctor", "--hosts", "sshhost1,sshdown", "--ssh-config", str(ssh_lab.config)], cwd=ROOT
    )
    assert down.returncode == 2 and "host sshdown: ssh failed" in down.stderr, down.stderr


def test_without_a_shared_filesystem_the_hosts_files_are_copied_back(
    ssh_lab: SshLab, tmp_path: Path
) -> None:
    """The run directory under lab.PRIVATE is a different folder on each host (and here)."""
    run_dir = PRIVATE / f"run-{tmp_path.name}"
    result = noderun(
        [*_ssh(ssh_lab, "--run-dir", str(run_dir)), str(CLASSIFIER), "--epochs", "1"],
        cwd=ROOT,
        timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert f"sshhost1, sshhost2 do not share {run_dir}: what the ranks wrote" in result.stdout
    record = json.loads((run_dir / "run.json").read_text())
    copied = record["remote_files"]
    assert set(copied) == {"sshhost1", "sshhost2"}, copied
    assert all(what.startswith("copied back (") for what in copied.values()), copied
    assert (ssh_lab.private("sshhost1") / run_dir.name / "metrics.csv").is_file()  # written there
    for name in ("metrics.csv", "runtime.json", "checkpoints/epoch-0001/.complete",
                 "logs/torchelastic/node1", "logs/rank0.log"):  # fmt: skip
        assert (run_dir / name).exists(), name
    counts = {line["stage"]: line["count"] for line in record["timeline"]}
    assert counts.get("rank_started") == 2, counts  # each host's rank: their lines merged in
    verified = cli(["verify", str(run_dir)])
    assert verified.returncode == 0, verified.stdout
    lines = {line.split()[0]: line for line in verified.stdout.splitlines() if line.strip()}
    assert lines["checkpoint"].split()[1] == "PASS" and lines["metrics"].split()[1] == "PASS"
