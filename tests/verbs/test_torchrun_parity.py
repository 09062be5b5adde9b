"""`noderun run X` against real `torchrun X` for the same X: every rank must see the same
launcher variables, sys.argv, __name__ and sys.path[0] (tests/scripts/env_probe.py records them).

Values torchrun picks at random (a free port, a uuid run id, `localhost` for its standalone
store) are compared for consistency instead: the same on every rank, a port, a local address.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from noderun.backends.ports import free_port
from tests.conftest import SCRIPTS, clean_env, noderun

pytestmark = pytest.mark.slow

PORT = "{port}"  # replaced by a free port per test
EXACT = (
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
    "ROLE_RANK", "ROLE_NAME", "ROLE_WORLD_SIZE", "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_USE_AGENT_STORE", "OMP_NUM_THREADS", "name",
    "path0", "cwd",
)  # fmt: skip
RANDOM = ("MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID")  # exact when X fixes them

# (id, nnodes for torchrun's agents, X); SCRIPT/MODULE/EXEC are filled in
CASES = [
    ("script", 1, ["--nproc-per-node", "2", "SCRIPT", "a", "b c"]),
    ("underscore-aliases", 1, ["--nproc_per_node=2", "--max_restarts=0", "SCRIPT"]),
    ("static-fixed-port-and-id", 1,
     ["--nnodes", "1", "--nproc-per-node", "2", "--master-port", PORT, "--rdzv-id", "fixed",
      "SCRIPT"]),
    ("module", 1, ["--standalone", "--nproc-per-node", "2", "-m", "MODULE", "--lr", "a b"]),
    ("no-python", 1, ["--nproc-per-node", "2", "--no-python", "EXEC", "x"]),
    ("max-restarts-seen", 1, ["--nproc-per-node", "1", "--max-restarts", "3", "SCRIPT"]),
    ("nproc-cpu", 1, ["--nproc-per-node", "cpu", "SCRIPT"]),
    ("two-nodes", 2,
     ["--nnodes", "2", "--nproc-per-node", "2", "--master-port", PORT, "--rdzv-id", "two",
      "SCRIPT", "--flag"]),
    ("rdzv-c10d-endpoint", 1,
     ["--rdzv-backend", "c10d", "--rdzv-endpoint", f"localhost:{PORT}", "--nproc-per-node", "2",
      "SCRIPT"]),
]  # fmt: skip


@pytest.fixture
def project(tmp_path: Path) -> dict[str, str]:
    """A working folder holding the probe as a script, a module of a package, an executable."""
    work = tmp_path / "work"
    (work / "pkg").mkdir(parents=True)
    (work / "pkg" / "__init__.py").write_text("")
    probe = (SCRIPTS / "env_probe.py").read_text()
    (work / "probe.py").write_text(probe)
    (work / "pkg" / "probe.py").write_text(probe)
    exe = work / "probe-exe"
    exe.write_text(f"#!{sys.executable}\n{probe}")
    exe.chmod(0o755)
    return {"SCRIPT": "probe.py", "MODULE": "pkg.probe", "EXEC": "./probe-exe", "cwd": str(work)}


def _fill(argv: list[str], project: dict[str, str], port: int) -> list[str]:
    return [project.get(a, a).replace(PORT, str(port)) for a in argv]


def _seen(out: Path) -> dict[int, dict[str, Any]]:
    return {int(p.stem[4:]): json.loads(p.read_text()) for p in sorted(out.glob("rank*.json"))}


def _torchrun(argv: list[str], nnodes: int, cwd: str, out: Path) -> dict[int, dict[str, Any]]:
    """Real torchrun, one agent per node (static rendezvous, --node-rank) when nnodes > 1."""
    torchrun = shutil.which("torchrun", path=os.path.dirname(sys.executable))
    assert torchrun
    agents = [
        subprocess.Popen(
            [torchrun, *(["--node-rank", str(node)] if nnodes > 1 else []), *argv],
            cwd=cwd,
            env=clean_env(PROBE_OUT=str(out)),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for node in range(nnodes)
    ]
    for agent in agents:
        _, err = agent.communicate(timeout=120)
        assert agent.returncode == 0, err[-2000:]
    return _seen(out)


def _noderun(argv: list[str], cwd: str, out: Path, run_dir: Path) -> dict[int, dict[str, Any]]:
    result = noderun(["run", "--run-dir", str(run_dir), *argv], cwd=Path(cwd), PROBE_OUT=str(out))
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    return _seen(out)


@pytest.mark.parametrize(("nnodes", "x"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_every_rank_sees_what_torchrun_gives_it(
    project: dict[str, str], tmp_path: Path, nnodes: int, x: list[str]
) -> None:
    port = free_port()
    argv = _fill(x, project, port)
    theirs_out, ours_out = tmp_path / "torchrun", tmp_path / "noderun"
    theirs_out.mkdir()
    ours_out.mkdir()
    theirs = _torchrun(argv, nnodes, project["cwd"], theirs_out)
    port_free_again = free_port()  # torchrun's sockets may linger; a fresh port for noderun
    ours = _noderun(_fill(x, project, port_free_again), project["cwd"], ours_out, tmp_path / "r")
    assert sorted(ours) == sorted(theirs) and theirs, (sorted(ours), sorted(theirs))
    fixed = {"--master-port", "--rdzv-id", "--rdzv-endpoint"} & set(x)
    for rank in theirs:
        for key in EXACT:
            assert ours[rank][key] == theirs[rank][key], (rank, key)
        assert ours[rank]["argv"][1:] == theirs[rank]["argv"][1:]
        for key in RANDOM:
            values = {ours[r][key] for r in ours}
            assert len(values) == 1 and None not in values, (key, values)  # one gang
        if fixed:
            if "--rdzv-id" in x:
                assert ours[rank]["TORCHELASTIC_RUN_ID"] == theirs[rank]["TORCHELASTIC_RUN_ID"]
            if "--master-port" in x or "--rdzv-endpoint" in x:  # noderun's store listens there
                assert ours[rank]["MASTER_PORT"] == str(port_free_again)
            if "--master-port" in x:  # torchrun's c10d store serves workers on another port
                assert theirs[rank]["MASTER_PORT"] == str(port)
        assert ours[rank]["MASTER_ADDR"] in ("127.0.0.1", "localhost")
        assert ours[rank]["MASTER_PORT"].isdigit()


def test_local_ranks_filter_keeps_other_ranks_off_the_console(
    project: dict[str, str], tmp_path: Path
) -> None:
    script = tmp_path / "say.py"
    script.write_text("import os\nprint('hello from', os.environ['RANK'], flush=True)\n")
    run_dir = tmp_path / "run"
    filtered = ["run", "--nnodes", "2", "--nproc-per-node", "2", "--local-ranks-filter", "0",
                "--run-dir", str(run_dir), str(script)]  # fmt: skip
    result = noderun(filtered)
    assert result.returncode == 0, result.stderr[-2000:]
    shown = sorted(line for line in result.stdout.splitlines() if "hello from" in line)
    assert shown == ["0:0| hello from 0", "1:2| hello from 2"]  # local rank 0 of each node
    for rank in range(4):  # every rank's log is still written
        assert f"hello from {rank}" in (run_dir / "logs" / f"rank{rank}.log").read_text()
    redirected = ["run", "--nproc-per-node", "2", "--redirects", "3",
                  "--run-dir", str(tmp_path / "q"), str(script)]  # fmt: skip
    quiet = noderun(redirected)
    assert quiet.returncode == 0 and "hello from" not in quiet.stdout
    assert "hello from 1" in (tmp_path / "q" / "logs" / "rank1.log").read_text()
