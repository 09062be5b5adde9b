"""The SSH lab for this folder's tests: started once per session, torn down after."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.ssh.lab import SshLab, available


@pytest.fixture(scope="session")
def ssh_lab() -> Iterator[SshLab]:
    why = available()
    if why:
        pytest.skip(why)
    lab = SshLab(hosts=2).start()
    try:
        yield lab
    finally:
        lab.stop()
