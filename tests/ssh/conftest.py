"""The SSH lab for this folder's tests: started once per session, torn down after."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

from tests.ssh.lab import SshLab, available


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
