"""Every option of the installed torch's torchrun, walked from its own parser: `noderun run`
takes it (as torchrun's, or passed to torchrun's agents) and `noderun submit` takes it or refuses
it in one line naming why; torchrun's PET_* variables are read as torchrun reads them.

A torch release that adds an option fails `test_every_torchrun_option_has_a_row` until
``TORCHRUN_HANDLING`` says how noderun handles it."""

from __future__ import annotations

import os
import shlex
import shutil
from pathlib import Path

import pytest
from torch.distributed import argparse_util
from torch.distributed.run import get_args_parser

from noderun import cli
from noderun.backends.ports import free_port
from noderun.verbs import run, submit
from noderun.verbs.torchrun_flags import (
    AGENT,
    NUMA_BINDINGS,
    REFUSED,
    START_METHODS,
    TORCHRUN_HANDLING,
)
from tests.conftest import SCRIPTS

PLAIN = str(SCRIPTS / "plain_torch.py")
ECHO = shutil.which("echo") or "/bin/echo"  # by path: some tests empty PATH
NOT_OPTIONS = ("help", "training_script", "training_script_args")
TORCH_ACTIONS = [a for a in get_args_parser()._actions if a.dest not in NOT_OPTIONS]

# dest -> a value for the option ("" for a switch) and other flags it needs to make sense
SAMPLES: dict[str, tuple[str, list[str]]] = {
    "nnodes": ("1", []),
    "nproc_per_node": ("2", []),
    "rdzv_backend": ("static", []),
    "rdzv_endpoint": ("localhost:{port}", []),
    "rdzv_id": ("my-run", []),
    "rdzv_conf": ("join_timeout=5", []),
    "standalone": ("", []),
    "max_restarts": ("1", []),
    "monitor_interval": ("0.5", []),
    "start_method": ("fork", []),
    "event_log_handler": ("console", []),
    "role": ("trainer", []),
    "module": ("", []),  # the program becomes a module below
    "no_python": ("", []),  # the program becomes an executable below
    "run_path": ("", []),
    "log_dir": ("logroot", []),
    "redirects": ("3", []),
    "tee": ("3", []),
    "local_ranks_filter": ("0", []),
    "duplicate_stdout_filters": ("loss,step", []),
    "duplicate_stderr_filters": ("Error", []),
    "node_rank": ("1", ["--nnodes", "2", "--master-addr", "127.0.0.1"]),
    "master_addr": ("127.0.0.1", ["--nnodes", "2", "--node-rank", "1"]),
    "master_port": ("{port}", []),
    "local_addr": ("127.0.0.1", []),
    "logs_specs": ("my_specs", []),
    "numa_binding": ("node", []),
    "signals_to_handle": ("SIGTERM,SIGUSR1", []),
    "shutdown_timeout": ("15", []),
    "virtual_local_rank": ("", []),
    "log_line_prefix_template": ("rank: ", []),  # torch 2.14
    "print_completion": ("bash", []),  # torch 2.14
}
# what a submitted job cannot take: SLURM places the nodes, node 0 is the job's first
SUBMIT_REFUSES = {"standalone", "node_rank", "master_addr", "rdzv_backend", "rdzv_endpoint",
                  "rdzv_conf"}  # fmt: skip
CASES = [(a.dest, flag) for a in TORCH_ACTIONS for flag in a.option_strings]


def test_every_torchrun_option_has_a_row() -> None:
    dests = {a.dest for a in TORCH_ACTIONS}
    assert dests - set(TORCHRUN_HANDLING) == set(), "torchrun grew an option: give it a row"
    # rows for options this torch lacks (a later release's) may only refuse them
    absent = set(TORCHRUN_HANDLING) - dests
    assert {TORCHRUN_HANDLING[name] for name in absent} <= {REFUSED}, absent
    assert dests <= set(SAMPLES)


def test_choices_are_torchruns() -> None:
    choices = {a.dest: a.choices for a in TORCH_ACTIONS if a.choices}
    assert tuple(choices["numa_binding"]) == NUMA_BINDINGS
    assert tuple(choices["start_method"]) == START_METHODS


def _argv(dest: str, flag: str) -> list[str]:
    sample, extra = SAMPLES[dest]
    given = [flag] if not sample else [flag, sample.format(port=free_port())]
    program = {"module": "timeit", "no_python": ECHO}.get(dest, PLAIN)
    return [*given, *extra, program]


@pytest.mark.parametrize(("dest", "flag"), CASES, ids=[f for _, f in CASES])
def test_run_takes_every_torchrun_option(
    dest: str,
    flag: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    code = cli.main(["run", "--dry-run", *_argv(dest, flag)])
    if TORCHRUN_HANDLING[dest] == REFUSED:
        err = capsys.readouterr().err.strip()
        assert code == 2 and len(err.splitlines()) == 1 and f"{flag} " in err, err
        return
    assert code == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    agents = [shlex.split(line) for line in out.splitlines() if "torch.distributed.run" in line]
    agents += [shlex.split(line) for line in out.splitlines() if "noderun.node" in line]
    assert agents, out
    if TORCHRUN_HANDLING[dest] == AGENT:  # every agent gets it, as torchrun takes it
        sample = SAMPLES[dest][0]
        long_flag = "--" + dest.replace("_", "-")
        wanted = f"--{dest.replace('_', '-')}={sample}" if sample else long_flag
        for agent in agents:
            assert wanted in agent or f"--torchrun-flag={wanted}" in agent, agent


@pytest.mark.parametrize(("dest", "flag"), CASES, ids=[f for _, f in CASES])
def test_submit_takes_or_refuses_every_torchrun_option_in_one_line(
    dest: str,
    flag: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", "/nonexistent")  # no sinfo/sbatch: the dry run asks no cluster
    try:
        code = cli.main(["submit", "--dry-run", *_argv(dest, flag)])
    except SystemExit as stop:  # argparse's own refusal
        code = stop.code  # type: ignore[assignment]
    captured = capsys.readouterr()
    refused = dest in SUBMIT_REFUSES or TORCHRUN_HANDLING[dest] == REFUSED
    assert (code == 0) is not refused, captured.err
    if code == 0:
        job = next(line for line in captured.out.splitlines() if line.startswith("exec "))
        if TORCHRUN_HANDLING[dest] == AGENT:  # the job's `noderun run` passes it on
            assert f"--{dest.replace('_', '-')}" in job, job
        return
    err = captured.err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "unrecognized" not in err and "hint: " in err, err
    assert flag in err or dest.replace("_", "-") in err, err


def test_agent_options_are_refused_in_srun_mode(capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["run", "--mode", "srun", "--start-method", "fork", "--dry-run", PLAIN])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "--start-method is an option of torchrun's agent" in err
    assert "use --mode torchrun" in err


def test_agent_options_reach_the_node_entry_of_a_step(tmp_path: Path) -> None:
    from noderun.backends.node_entry import _parser, exec_argv, resolve
    from noderun.plan.slurm import LaunchMode, StepPlan

    step = StepPlan(
        mode=LaunchMode.TORCHRUN, nnodes=2, nproc_per_node=2, run_dir=tmp_path,
        script=PLAIN, agent_flags=("--numa-binding=node", "--virtual-local-rank"),
    )  # fmt: skip
    node_argv = step.node_argv()
    assert "--torchrun-flag=--numa-binding=node" in node_argv
    cut = node_argv.index("--")
    opts = _parser().parse_args(node_argv[3:cut])
    environ = {"SLURM_JOB_ID": "7", "SLURM_NODEID": "0", "SLURM_STEP_NODELIST": "n1,n2",
               "SLURM_STEP_NUM_NODES": "2", "SLURM_STEP_ID": "0", "SLURM_PROCID": "0",
               "SLURM_LOCALID": "0", "SLURM_NTASKS": "2"}  # fmt: skip
    spec = resolve(opts, environ)
    argv = exec_argv(spec, node_argv[cut + 1 :], "python", agent_flags=opts.torchrun_flag)
    assert argv[argv.index("--tee=3") + 1 : argv.index("--tee=3") + 3] == [
        "--numa-binding=node",
        "--virtual-local-rank",
    ]


# ---- PET_* variables, as torchrun reads them ----


def test_pet_variables_are_read_for_exactly_torchruns_env_options() -> None:
    """torchrun's `env`/`check_env` actions read PET_<DEST>; its plain ones do not."""
    for verb, table in (("run", run.OPTIONS), ("submit", submit.OPTIONS)):
        by_pet = {o.pet: o for o in table.options if o.pet}
        for action in TORCH_ACTIONS:
            reads_env = isinstance(action, argparse_util.env | argparse_util.check_env)
            option = by_pet.get(action.dest)
            refused = any(o.refusal and o.name == action.dest for o in table.options)
            if reads_env and not refused:
                assert option is not None, f"{verb}: PET_{action.dest.upper()} is not read"
            if not reads_env:
                assert option is None, f"{verb}: torchrun does not read PET_{action.dest.upper()}"


def _agent(argv: list[str], capsys: pytest.CaptureFixture[str]) -> list[str]:
    assert cli.main(["run", "--dry-run", *argv, PLAIN]) == 0, capsys.readouterr().err
    lines = capsys.readouterr().out.splitlines()
    return next(shlex.split(line) for line in lines if "torch.distributed.run" in line)


@pytest.mark.parametrize(
    ("argv", "environ", "config", "expected"),
    [
        ([], {"PET_NPROC_PER_NODE": "2"}, "", "--nproc-per-node=2"),  # torchrun's variable
        ([], {"PET_NPROC_PER_NODE": "2"}, "nproc_per_node = 4", "--nproc-per-node=2"),  # > file
        ([], {"PET_NPROC_PER_NODE": "2", "NODERUN_NPROC_PER_NODE": "3"}, "",
         "--nproc-per-node=3"),  # noderun's own variable wins
        (["--nproc-per-node", "1"], {"PET_NPROC_PER_NODE": "2"}, "", "--nproc-per-node=1"),
        ([], {"PET_NNODES": "2:2"}, "", "--nnodes=2"),
        ([], {"PET_START_METHOD": "forkserver"}, "", "--start-method=forkserver"),
        ([], {"PET_VIRTUAL_LOCAL_RANK": "1"}, "", "--virtual-local-rank"),
        ([], {"PET_RDZV_ID": "from-pet"}, "", "--rdzv-id=from-pet"),
    ],
)  # fmt: skip
def test_pet_precedence(
    argv: list[str],
    environ: dict[str, str],
    config: str,
    expected: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    if config:
        (tmp_path / "noderun.toml").write_text(f"[run]\n{config}\n")
    for name, text in environ.items():
        monkeypatch.setenv(name, text)
    assert expected in _agent(argv, capsys)


def test_pet_numa_binding_is_not_read_as_torchrun_does_not(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PET_NUMA_BINDING", "node")
    assert not any(a.startswith("--numa-binding") for a in _agent([], capsys))


def test_pet_variables_do_not_reach_the_agents(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The agents get flags; a PET_RDZV_BACKEND left in their environment would switch
    their rendezvous away from the one noderun planned."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PET_RDZV_BACKEND", "c10d")
    monkeypatch.setenv("PET_MONITOR_INTERVAL", "2")
    assert "--monitor-interval=2.0" in _agent([], capsys)
    assert not [k for k in os.environ if k.startswith("PET_")]


def test_a_bad_pet_value_is_one_line_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PET_NPROC_PER_NODE", "many")
    assert cli.main(["run", "--dry-run", PLAIN]) == 2
    err = capsys.readouterr().err
    assert "PET_NPROC_PER_NODE='many'" in err and len(err.strip().splitlines()) == 1
    monkeypatch.setenv("PET_RDZV_BACKEND", "etcd")
    monkeypatch.delenv("PET_NPROC_PER_NODE")
    assert cli.main(["run", "--dry-run", PLAIN]) == 2
    assert "--rdzv-backend etcd is not used" in capsys.readouterr().err


@pytest.mark.slow
def test_agent_options_work_in_a_real_run(tmp_path: Path) -> None:
    """--role (torchrun's ROLE_NAME) and PET_START_METHOD reach torchrun's real agents."""
    import json

    from tests.conftest import noderun

    probe = tmp_path / "probe"
    probe.mkdir()
    argv = ["run", "--nproc_per_node", "2", "--role", "trainer", "--monitor-interval", "0.2",
            "--run_dir", str(tmp_path / "run"), str(SCRIPTS / "env_probe.py")]  # fmt: skip
    result = noderun(argv, cwd=tmp_path, PROBE_OUT=str(probe), PET_START_METHOD="fork")
    assert result.returncode == 0, result.stderr[-2000:]
    seen = [json.loads((probe / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [s["ROLE_NAME"] for s in seen] == ["trainer", "trainer"]


@pytest.mark.parametrize(
    "where",
    [["--hosts", "node-a,node-b"], ["--nnodes", "2", "--node-rank", "1", "--master-addr", "h"]],
    ids=["ssh", "by-hand"],
)
def test_agent_options_reach_ssh_and_hand_started_nodes(
    where: list[str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    assert cli.main(["run", "--dry-run", *where, "--role", "trainer", PLAIN]) == 0
    out = capsys.readouterr().out
    commands = [line for line in out.splitlines() if PLAIN in line]
    assert commands and all("--role=trainer" in line for line in commands), out


@pytest.mark.slow
@pytest.mark.slurm
def test_agent_options_reach_torchrun_through_the_node_entry_on_the_lab(tmp_path: Path) -> None:
    """submit → the job's `noderun run` → srun → the node entry → torchrun's agents."""
    import json

    from tests.conftest import noderun
    from tests.slurm.lab import require_lab

    require_lab()
    probe = tmp_path / "probe"
    probe.mkdir()
    argv = ["submit", "--wait", "--nodes", "2", "--nproc-per-node", "2", "--role", "trainer",
            "--start_method", "fork", "--env", f"PROBE_OUT={probe}", "--run-dir",
            str(tmp_path / "run"), str(SCRIPTS / "env_probe.py")]  # fmt: skip
    result = noderun(argv, cwd=tmp_path, timeout=240)
    assert result.returncode == 0, result.stderr[-2000:]
    seen = [json.loads((probe / f"rank{r}.json").read_text()) for r in range(4)]
    assert {s["ROLE_NAME"] for s in seen} == {"trainer"}


@pytest.mark.parametrize(
    ("argv", "environ", "message"),
    [
        (["--log-line-prefix-template", "${rank}: "], {},
         "--log-line-prefix-template is not used: noderun prefixes every console line"),
        (["--print-completion", "zsh"], {}, "use `noderun completion bash` (or zsh)"),
        ([], {"PET_LOG_LINE_PREFIX_TEMPLATE": "x"},
         "PET_LOG_LINE_PREFIX_TEMPLATE (torchrun's --log-line-prefix-template) is not used"),
    ],
)  # fmt: skip
def test_later_torchrun_options_are_refused_in_one_line(
    argv: list[str],
    environ: dict[str, str],
    message: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """torch 2.14's --log-line-prefix-template and --print-completion, whatever torch is here."""
    monkeypatch.chdir(tmp_path)
    for name, text in environ.items():
        monkeypatch.setenv(name, text)
    for verb in ("run", "submit"):
        assert cli.main([verb, "--dry-run", *argv, PLAIN]) == 2
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1, err
