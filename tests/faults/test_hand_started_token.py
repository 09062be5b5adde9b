"""Nodes started by hand (``noderun run --node-rank R``) share the job token only through
NODERUN_JOB_TOKEN. When one machine has it and another has none (or another value), the node
turned away says so at once in one line naming the variable and the fix, exit 2; node 0 ends
at its join timeout naming the node it turned away. Seen before: node 1 ended "the script
refused its input (exit 2, see the error above)" with no error above it."""

from __future__ import annotations

from pathlib import Path

import pytest

from noderun.backends.ports import free_port
from tests.conftest import SCRIPTS, start_noderun

pytestmark = pytest.mark.slow


def test_a_hand_started_node_with_another_token_is_one_line_naming_the_variable(
    tmp_path: Path,
) -> None:
    port = str(free_port())

    def node(rank: int, **env: str) -> list[str]:
        script = str(SCRIPTS / "exit_with.py")
        return ["run", "--nnodes", "2", "--node-rank", str(rank), "--master-addr", "127.0.0.1",
                "--master-port", port, "--join-timeout", "4", "--run-dir",
                str(tmp_path / f"node{rank}"), script, "0", "all"]  # fmt: skip

    first = start_noderun(node(0), NODERUN_JOB_TOKEN="4e8f1c")
    second = start_noderun(node(1))  # this machine's shell never exported it
    out1, _ = second.communicate(timeout=60)
    out0, _ = first.communicate(timeout=60)
    assert second.returncode == 2, out1
    said = [line for line in out1.splitlines() if "turned node 1" in line]
    assert len(said) == 1 and "NODERUN_JOB_TOKEN" in said[0], out1
    assert "export the same NODERUN_JOB_TOKEN on every machine" in said[0], out1
    assert first.returncode == 1, out0
    assert "turned away (not this job's token): node 1" in out0, out0
    assert out0.count("dropped a check-in") == 1, out0
    assert "4e8f1c" not in out0 + out1  # the token itself is never said
