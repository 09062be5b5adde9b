"""Seed 001's checklist across SSH hosts on the lab, whose hosts see different files at
``lab.PRIVATE`` and where sshhost3 has no venv: `noderun doctor --hosts --script
--check-path` (and the same typed on each host by hand) names the node whose code or paths
differ; `noderun run --hosts` with a host
lacking the venv or the working directory is one line naming that host, exit 2, and starts
nothing anywhere."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from noderun.backends.ports import free_port, port_in_use
from tests.conftest import ROOT, noderun, processes_running
from tests.ssh.conftest import differing_script_and_data
from tests.ssh.lab import PRIVATE, SshLab

pytestmark = [pytest.mark.slow, pytest.mark.ssh]


def test_doctor_names_the_host_with_other_code_or_a_missing_path(
    ssh_doctor: tuple[subprocess.CompletedProcess[str], Path, Path],
) -> None:
    result, script, data = ssh_doctor  # the doctor run also read by test_ssh_run
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-2000:]
    report = json.loads(result.stdout)
    found = {(c["node"], c["check"]): c for c in report["checks"]}
    assert found[("sshhost1", "same-code")]["status"] == "PASS"  # a tie: node 0 is the reference
    code = found[("sshhost2", "same-code")]
    assert code["status"] == "FAIL", code
    assert script.name in code["detail"] and "differs from sshhost1's" in code["detail"], code
    assert "noderun" not in code["detail"] and "torch" not in code["detail"]  # same install
    assert f"copy the same {script} to sshhost2" in code["fix"], code
    assert found[("sshhost1", "paths")]["status"] == "PASS"
    paths = found[("sshhost2", "paths")]
    assert paths["status"] == "FAIL" and f"{data} not found on sshhost2" in (paths["detail"]), paths
    assert str(ROOT / "examples") not in paths["detail"]  # seen by both hosts
    assert found[("all", "collective")]["status"] == "PASS", report


def test_a_host_without_the_venv_is_one_line_and_nothing_starts(
    ssh_lab: SshLab, tmp_path: Path
) -> None:
    script = tmp_path / f"never_{tmp_path.name}.py"
    script.write_text("import time\ntime.sleep(60)\n")
    run_dir = tmp_path / "run"
    result = noderun(
        ["run", "--hosts", "sshhost1,sshhost3", "--ssh-config", str(ssh_lab.config),
         "--run-dir", str(run_dir), str(script)],
        cwd=ROOT,
    )  # fmt: skip
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert f"host sshhost3 has no interpreter {sys.executable}" in lines[0], lines
    assert "hint:" in lines[0]
    assert not run_dir.exists() and not processes_running(str(script))


def test_a_host_without_the_working_directory_is_one_line_and_nothing_starts(
    ssh_lab: SshLab, tmp_path: Path
) -> None:
    work = PRIVATE / f"work-{tmp_path.name}"  # here and on sshhost1 only
    work.mkdir()
    (ssh_lab.private("sshhost1") / work.name).mkdir()
    script = tmp_path / f"never_{tmp_path.name}.py"
    script.write_text("import time\ntime.sleep(60)\n")
    run_dir = tmp_path / "run"
    result = noderun(
        ["run", "--hosts", "sshhost1,sshhost2", "--ssh-config", str(ssh_lab.config),
         "--run-dir", str(run_dir), str(script)],
        cwd=work,
    )  # fmt: skip
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and f"host sshhost2 has no directory {work}" in lines[0], lines
    assert not run_dir.exists() and not processes_running(str(script))


def test_doctor_on_nodes_started_by_hand_gives_every_node_the_whole_table(
    ssh_lab: SshLab, tmp_path: Path
) -> None:
    """`noderun doctor --nnodes 2 --node-rank R --master-addr sshhost1` typed on each host,
    node 1 first: both print both nodes' checks, the odd script and the missing path named."""
    script, data = differing_script_and_data(ssh_lab, tmp_path.name)
    port = free_port()
    while port_in_use(port + 1):  # the doctor of hand-started nodes also takes port + 1
        port = free_port()

    def on_host(host: str, rank: int) -> subprocess.Popen[str]:
        command = shlex.join(
            [sys.executable, "-m", "noderun", "doctor", "--nnodes", "2", "--node-rank", str(rank),
             "--master-addr", "sshhost1", "--master-port", str(port), "--script",
             str(script), "--check-path", str(data), "--json",
             "--run-dir", str(tmp_path / f"doc{rank}")]
        )  # fmt: skip
        return subprocess.Popen(
            ["ssh", "-F", str(ssh_lab.config), host, f"cd {shlex.quote(str(ROOT))} && {command}"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    second = on_host("sshhost2", 1)
    first = on_host("sshhost1", 0)
    reports = []
    for proc in (first, second):
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 1, out[-2000:] + err[-2000:]  # unhealthy: the checks FAIL
        reports.append(json.loads(out))
    for report in reports:
        assert report["nodes"] == ["sshhost1", "sshhost2"], report["nodes"]
        found = {(c["node"], c["check"]): c for c in report["checks"]}
        assert found[("sshhost1", "port-free")]["status"] == "PASS"
        assert found[("sshhost2", "master-reachable")]["status"] == "PASS"
        assert found[("sshhost1", "same-code")]["status"] == "PASS"
        assert "differs from sshhost1's" in found[("sshhost2", "same-code")]["detail"]
        assert found[("sshhost2", "paths")]["status"] == "FAIL"
        assert found[("sshhost1", "shared-fs")]["status"] == "SKIP"
