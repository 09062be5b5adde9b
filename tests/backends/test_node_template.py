"""The node template (noderun/node_template.py, backends/templated.py): an agent forked from it
ends, reports and reads/writes as the exec'd ``python -m MODULE`` would.

The unit tests fork agents of a tiny module (no torch: a template starts in tens of ms); one
slow test checks that ``noderun run --nnodes 2`` really forks its torchrun agents.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from noderun.backends import templated
from noderun.backends.templated import NodeTemplate, TemplatedAgent, open_template
from noderun.plan import NodeCommand
from tests.conftest import noderun, wait_until

PROBE = textwrap.dedent(
    """
    import json, os, signal, sys, time
    what = sys.argv[1]
    if what == "exit":
        sys.exit(int(sys.argv[2]))
    if what == "raise":
        raise ValueError("deliberate")
    if what == "signal":
        os.kill(os.getpid(), getattr(signal, sys.argv[2]))
        time.sleep(5)
    if what == "interrupt":
        raise KeyboardInterrupt
    if what == "report":
        print(json.dumps({
            "env": dict(os.environ), "cwd": os.getcwd(), "argv": sys.argv, "path0": sys.path[0],
            "sid": os.getsid(0), "pgid": os.getpgid(0), "pid": os.getpid(),
            "stdin": sys.stdin.read(), "main": __name__,
        }))
        print("to stderr", file=sys.stderr)
    if what == "sleep":
        print("up", flush=True)
        time.sleep(60)
    """
)


@pytest.fixture
def probe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[NodeTemplate]:
    """A template of the module ``probe_mod`` (found through the working directory, as -m)."""
    (tmp_path / "probe_mod.py").write_text(PROBE)
    monkeypatch.chdir(tmp_path)
    template = NodeTemplate(sys.executable, ["-m", "probe_mod"], dict(os.environ))
    yield template
    template.close()


def _spawn(template: NodeTemplate, *args: str, env: dict[str, str] | None = None) -> TemplatedAgent:
    argv = [sys.executable, "-m", "probe_mod", *args]
    return template.spawn(argv, env or {**os.environ, "PYTHONUNBUFFERED": "1"}, os.getcwd())


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (("exit", "3"), 3),
        (("exit", "0"), 0),
        (("raise",), 1),
        (("signal", "SIGTERM"), -signal.SIGTERM),
        (("signal", "SIGKILL"), -signal.SIGKILL),
        (("interrupt",), -signal.SIGINT),
    ],
)
def test_a_forked_agent_ends_as_python_m_would(
    probe: NodeTemplate, tmp_path: Path, args: tuple[str, ...], code: int
) -> None:
    agent = _spawn(probe, *args)
    assert agent.wait(timeout=20) == code
    plain = subprocess.run([sys.executable, "-m", "probe_mod", *args], cwd=tmp_path, check=False)
    assert plain.returncode == code  # the exec'd one, for comparison
    err = agent.stderr.read()
    if args == ("raise",):
        assert "ValueError: deliberate" in err and "node_template" not in err


def test_a_forked_agent_has_its_env_cwd_argv_session_and_pipes(
    probe: NodeTemplate, tmp_path: Path
) -> None:
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONUNBUFFERED": "1", "NODERUN__NODE_RANK": "1"}
    sub = tmp_path / "sub"  # its own copy: -m finds the module in the working directory
    sub.mkdir()
    (sub / "probe_mod.py").write_text(PROBE)
    argv = [sys.executable, "-m", "probe_mod", "report", "x y"]
    agent = probe.spawn(argv, env, str(sub))
    assert agent.wait(timeout=20) == 0
    seen = json.loads(agent.stdout.readline())
    assert seen["env"] == env  # exactly what was asked: nothing of the template's own
    assert seen["cwd"] == str(sub) and seen["path0"] == str(sub)  # as `python -m` in sub
    assert seen["argv"] == [str(sub / "probe_mod.py"), "report", "x y"]
    assert seen["main"] == "__main__" and seen["stdin"] == ""
    assert seen["pid"] == agent.pid == seen["sid"] == seen["pgid"]  # its own session
    assert psutil.Process(agent.pid).ppid() == probe.pid if agent.poll() is None else True
    assert agent.stderr.read() == "to stderr\n"


def test_templates_and_agents_die_with_a_sigkilled_launcher(tmp_path: Path) -> None:
    (tmp_path / "probe_mod.py").write_text(PROBE)
    launcher = textwrap.dedent(
        """
        import os, sys
        from noderun.backends.templated import NodeTemplate
        t = NodeTemplate(sys.executable, ["-m", "probe_mod"], dict(os.environ))
        a = t.spawn([sys.executable, "-m", "probe_mod", "sleep"],
                    {**os.environ, "PYTHONUNBUFFERED": "1"}, os.getcwd())
        print(t.pid, a.pid, flush=True)
        assert a.stdout.readline() == "up\\n"
        print("ready", flush=True)
        sys.stdin.read()
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", launcher],
        cwd=tmp_path,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    pids = [int(p) for p in proc.stdout.readline().split()]
    assert proc.stdout.readline() == "ready\n"
    family = [psutil.Process(pid) for pid in pids]
    proc.kill()
    proc.wait()
    _, alive = psutil.wait_procs(family, timeout=10)
    assert not [p for p in alive if p.status() != psutil.STATUS_ZOMBIE], alive


def test_closing_the_template_ends_its_agents(probe: NodeTemplate) -> None:
    agent = _spawn(probe, "sleep")
    assert agent.stdout.readline() == "up\n"
    probe.close()
    assert agent.wait(timeout=10) == -signal.SIGKILL

    def ended() -> bool:  # its parent-death signal lands just after the template is gone
        with contextlib.suppress(psutil.NoSuchProcess):
            return psutil.Process(agent.pid).status() == psutil.STATUS_ZOMBIE
        return True

    assert wait_until(ended, 10), "the agent outlived its template"
    with pytest.raises(OSError):
        _spawn(probe, "exit", "0")


def _node(rank: int, env: dict[str, str], **kw: object) -> NodeCommand:
    argv = (sys.executable, "-m", "torch.distributed.run", f"--node-rank={rank}", "x.py")
    return NodeCommand(node_rank=rank, host="h", argv=argv, env=env, **kw)  # type: ignore[arg-type]


def test_which_nodes_are_forked(monkeypatch: pytest.MonkeyPatch) -> None:
    base = {"PYTHONUNBUFFERED": "1", "NODERUN__RUN_DIR": "/r"}
    envs = {0: {**base, "NODERUN__NODE_RANK": "0"}, 1: {**base, "NODERUN__NODE_RANK": "1"}}
    assert templated.shared(list(envs.values())) == base
    assert all(templated.forkable(e, base) for e in envs.values())
    assert not templated.forkable({**envs[1], "OMP_NUM_THREADS": "2"}, base)  # read at import
    assert not templated.forkable({"NODERUN__NODE_RANK": "1"}, {})  # buffered stdio
    nodes = [_node(0, envs[0]), _node(1, envs[1])]
    assert all(templated.is_agent(n) for n in nodes)
    assert not templated.is_agent(_node(0, envs[0], remote=True))
    monkeypatch.setenv(templated.SWITCH, "0")
    assert open_template(nodes, envs) == (None, set())  # switched off: exec'd as before
    monkeypatch.setenv(templated.SWITCH, "1")
    assert open_template(nodes[:1], envs) == (None, set())  # one node gains nothing
    remote = [_node(0, envs[0], remote=True), _node(1, envs[1], remote=True)]
    assert open_template(remote, envs) == (None, set())


def test_a_template_that_cannot_start_is_given_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(OSError, match="No module named"):
        NodeTemplate(sys.executable, ["-m", "no_such_module_here"], dict(os.environ))
    env = {"PYTHONUNBUFFERED": "1"}
    nodes = [_node(r, env) for r in (0, 1)]
    missing = [
        NodeCommand(
            node_rank=n.node_rank, host="h", argv=(str(tmp_path / "nopython"), *n.argv[1:]), env=env
        )
        for n in nodes
    ]
    assert open_template(missing, {0: env, 1: env}) == (None, set())


@pytest.mark.slow
def test_noderun_run_forks_its_local_agents(tmp_path: Path) -> None:
    """Each rank's agent's parent is the template, the agent shows its own command line;
    the run's output is as usual."""
    script = tmp_path / "whose.py"
    script.write_text(
        textwrap.dedent(
            """
            import os
            def parent(pid):
                return int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
            agent = os.getppid()
            own = open(f"/proc/{agent}/cmdline").read().rstrip("\\0").split("\\0")
            assert own[1:3] == ["-m", "torch.distributed.run"], own  # its own argv, as exec'd
            assert f"--node-rank={os.environ['GROUP_RANK']}" in own, own
            above = open(f"/proc/{parent(agent)}/cmdline").read()
            print("template" if "node_template.py" in above else "exec", os.environ["RANK"])
            """
        )
    )
    run_dir = tmp_path / "run"
    args = ["run", "--nnodes", "2", "--nproc-per-node", "1", "--run-dir", str(run_dir), str(script)]
    out = noderun(args, NODERUN_NODE_TEMPLATE="1")  # whatever the suite runs with
    assert out.returncode == 0, out.stderr
    assert sorted(line.split("| ", 1)[1] for line in out.stdout.splitlines() if "| " in line) == [
        "template 0",
        "template 1",
    ]
    assert json.loads((run_dir / "run.json").read_text())["node_exit_codes"] == {"0": 0, "1": 0}
