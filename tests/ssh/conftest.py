"""The SSH lab for this folder's tests: started once per session, torn down after."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ROOT, noderun
from tests.ssh.lab import PRIVATE, SshLab, available


@pytest.fixture(scope="session")
def ssh_lab() -> Iterator[SshLab]:
    why = available()
    if why:
        pytest.skip(why)
    # sshhost3 is a host without this venv (an empty tmpfs over it there)
    lab = SshLab(hosts=3, hidden={"sshhost3": [sys.prefix]}).start()
    try:
        yield lab
    finally:
        lab.stop()


def differing_script_and_data(lab: SshLab, tag: str) -> tuple[Path, Path]:
    """A script at one path, other content on each host; data at a path only sshhost1 has."""
    script, data = PRIVATE / f"train-{tag}.py", PRIVATE / f"data-{tag}"
    for name, text in (("sshhost1", "print('one')\n"), ("sshhost2", "print('two')\n")):
        (lab.private(name) / script.name).write_text(text)
    (lab.private("sshhost1") / data.name).mkdir()
    return script, data


@pytest.fixture(scope="session")
def ssh_doctor(
    ssh_lab: SshLab, tmp_path_factory: pytest.TempPathFactory
) -> tuple[subprocess.CompletedProcess[str], Path, Path]:
    """One `noderun doctor --hosts sshhost1,sshhost2 --script --check-path --json` on the lab
    (its output, the script and the data path it checked): test_ssh_checklist reads the host
    whose code or paths differ, test_ssh_run the probes of every host and the collective (a
    doctor run each cost ~7 CPU-s)."""
    work = tmp_path_factory.mktemp("ssh-doctor")
    script, data = differing_script_and_data(ssh_lab, work.name)
    result = noderun(
        ["doctor", "--hosts", "sshhost1,sshhost2", "--ssh-config", str(ssh_lab.config),
         "--script", str(script), "--check-path", str(data),
         "--check-path", str(ROOT / "examples"), "--json", "--run-dir", str(work / "doc")],
        cwd=ROOT,
        timeout=300,
    )  # fmt: skip
    return result, script, data
