"""`noderun run --hosts`: every rank on every SSH host sees what plain torchrun gives its
workers, and the --env variables (tests/backends/test_rank_environment.py: the other modes)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.backends.test_rank_environment import DUMP, EXACT, _seen, torchrun_gives
from tests.conftest import ROOT, noderun
from tests.ssh.lab import SshLab

pytestmark = [pytest.mark.slow, pytest.mark.ssh]
__all__ = ["torchrun_gives"]  # the fixture, shared


def test_ssh_hosts_give_torchruns_environment_and_env_options(
    ssh_lab: SshLab, torchrun_gives: dict[int, dict[str, Any]], tmp_path: Path
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    result = noderun(
        ["run", "--hosts", "sshhost1,sshhost2", "--ssh-config", str(ssh_lab.config),
         "--nproc-per-node", "2", "--run-dir", str(tmp_path / "run"), "--env",
         f"DUMP_OUT={out}", "--env", "K=over ssh", DUMP],
        cwd=ROOT, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    seen = _seen(out, 4)
    for rank, env in seen.items():
        assert not sorted(set(torchrun_gives[0]) - set(env)), rank
        assert env["K"] == "over ssh" and env["OMP_NUM_THREADS"] == "1"
        same = {k: env[k] for k in EXACT if k not in ("RANK", "WORLD_SIZE", "ROLE_RANK")}
        assert same["LOCAL_WORLD_SIZE"] == "2" and same["GROUP_RANK"] == str(rank // 2)
