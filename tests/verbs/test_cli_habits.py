"""The ecosystem's command-line habits on every verb: torchrun's --under_score spellings,
--nnodes and --nodes as one option, and an option that does not apply refused, never ignored."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from noderun import cli
from tests.conftest import SCRIPTS

PLAIN = str(SCRIPTS / "plain_torch.py")


def _verb_parsers() -> dict[str, argparse.ArgumentParser]:
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


VERB_PARSERS = _verb_parsers()


def test_every_verb_is_walked() -> None:
    assert set(VERB_PARSERS) == set(cli.VERBS)


@pytest.mark.parametrize("verb", cli.VERBS)
def test_every_dashed_option_has_its_underscore_spelling(verb: str) -> None:
    strings = VERB_PARSERS[verb]._option_string_actions
    dashed = [s for s in strings if s.startswith("--") and "-" in s[2:]]
    assert dashed or verb in ("check", "stacks", "completion", "ls", "status", "logs", "cancel")
    for flag in dashed:
        twin = "--" + flag[2:].replace("-", "_")
        assert strings.get(twin) is strings[flag], f"noderun {verb} {twin}"


@pytest.mark.parametrize("verb", ["run", "submit", "scale", "verify", "doctor"])
def test_nnodes_and_nodes_are_one_option(verb: str) -> None:
    strings = VERB_PARSERS[verb]._option_string_actions
    assert strings["--nnodes"] is strings["--nodes"]


def test_help_shows_the_dashed_spelling_once(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["run", "--help"])
    out = capsys.readouterr().out
    assert "--run-dir RUN_DIR" in out and "--run_dir" not in out
    assert "--nnodes NNODES, --nodes NNODES" in out


def test_underscore_spellings_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", "/nonexistent")  # no sbatch: submit's dry run asks no cluster
    argv = ["run", "--dry-run", "--run_dir", "r1", "--stall_timeout", "0", "--nodes", "2", PLAIN]
    assert cli.main(argv) == 0, capsys.readouterr().err
    assert str(tmp_path / "r1") in capsys.readouterr().out
    argv = ["submit", "--dry-run", "--join_timeout", "7", "--run_dir", "r2", "--nnodes", "2",
            "--cpus_per_task", "1", PLAIN]  # fmt: skip
    assert cli.main(argv) == 0, capsys.readouterr().err
    job = capsys.readouterr().out
    assert "--join-timeout=7" in job and "--nnodes=2" in job and str(tmp_path / "r2") in job


# ---- doctor: one --nnodes, and options of another mode refused ----


@pytest.fixture
def doctor_calls(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[tuple[str, Any]]:
    """doctor's runner replaced: which mode ran, with what."""
    from noderun.doctor import runner

    calls: list[tuple[str, Any]] = []

    class Result:
        healthy = True
        duration_sec = 0.0

        def to_dict(self) -> dict[str, object]:
            return {"healthy": True}

    def record(name: str) -> Any:
        def call(*args: Any) -> Result:
            calls.append((name, args))
            return Result()

        return call

    for name in ("submit", "run_hand_started", "run_local", "run_over_ssh", "run_in_allocation"):
        monkeypatch.setattr(runner, name, record(name))
    monkeypatch.chdir(tmp_path)
    for name in ("SLURM_JOB_ID", "SLURM_NODELIST", "SLURM_JOB_NODELIST"):
        monkeypatch.delenv(name, raising=False)
    return calls


@pytest.mark.parametrize("flag", ["--nodes", "--nnodes"])
def test_doctor_nodes_mean_the_same_in_both_spellings(
    flag: str, doctor_calls: list[tuple[str, Any]]
) -> None:
    assert cli.main(["doctor", "--json", "--submit", flag, "3"]) == 0
    assert cli.main(["doctor", "--json", flag, "2", "--node-rank", "1", "--master-addr", "h"]) == 0
    (submitted, submit_args), (by_hand, hand_args) = doctor_calls
    assert (submitted, submit_args[0]) == ("submit", 3)
    assert (by_hand, hand_args[:3]) == ("run_hand_started", (2, 1, "h"))


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--submit", "--master-port", "29911"], "--master-port does not apply to doctor as a "
         "submitted job"),
        (["--master-port", "29911"], "--master-port does not apply to doctor on this machine"),
        (["--nodes", "3"], "--nnodes does not apply to doctor on this machine"),
        (["--hosts", "a,b", "--partition", "p"], "--partition does not apply to doctor over ssh"),
        (["--submit", "--ssh-config", "f"], "--ssh-config does not apply"),
        (["--node-rank", "0", "--nnodes", "2", "--master-addr", "h", "--submit"],
         "--submit does not apply to doctor on nodes started by hand"),
    ],
)  # fmt: skip
def test_doctor_refuses_an_option_of_another_mode(
    argv: list[str],
    message: str,
    doctor_calls: list[tuple[str, Any]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli.main(["doctor", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and "hint: " in err and len(err.strip().splitlines()) == 1, err
    assert doctor_calls == []


# ---- run: an option of another way of launching is refused ----


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--join-timeout", "5"], "--join-timeout does not apply on simulated nodes"),
        (["--mode", "torchrun"], "--mode does not apply on simulated nodes"),
        (["--ssh-config", "cfg"], "--ssh-config does not apply on simulated nodes"),
        (["--hosts", "a", "--node-rank", "0"], "--node-rank does not apply over ssh"),
    ],
)
def test_run_refuses_an_option_of_another_way(
    argv: list[str],
    message: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    assert cli.main(["run", "--dry-run", *argv, PLAIN]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize(
    ("argv", "shown"),
    [
        (["--mode", "srun"], "--mode=srun"),
        (["--mode", "torchrun"], "--mode=torchrun"),
        (["--join-timeout", "5"], "--join-timeout=5"),
        # torchrun's static form: this node of the step's one job, on the port given
        (["--node-rank", "0", "--master-addr", "node1", "--master-port", "29533"],
         "--master-port=29533"),
    ],
)  # fmt: skip
def test_run_inside_an_srun_step_takes_the_slurm_options(
    argv: list[str],
    shown: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`srun --ntasks-per-node=2 noderun run --mode srun …`: each task one rank of one job (the
    way of launching was read as simulated nodes there, and --mode refused on every task);
    `--node-rank/--master-addr` there are torchrun's static form, not a node started by hand."""
    monkeypatch.chdir(tmp_path)
    step = {"SLURM_JOB_ID": "81", "SLURM_STEP_ID": "0", "SLURM_STEP_NODELIST": "node1",
            "SLURM_JOB_NODELIST": "node1", "SLURM_STEP_NUM_NODES": "1",
            "SLURM_STEP_TASKS_PER_NODE": "1", "SLURM_NODEID": "0", "SLURM_PROCID": "0",
            "SLURMD_NODENAME": "node1", "SLURM_JOB_CPUS_PER_NODE": "2"}  # fmt: skip
    for name, value in step.items():
        monkeypatch.setenv(name, value)
    assert cli.main(["run", "--dry-run", *argv, PLAIN]) == 0, capsys.readouterr().err
    node_argv = capsys.readouterr().out.strip().splitlines()[-1]
    assert "-m noderun.node" in node_argv and shown in node_argv, node_argv


def test_run_does_not_refuse_a_variable_shared_by_every_way(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """NODERUN_JOIN_TIMEOUT (or the config file) serves SLURM runs; a local run ignores it."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("NODERUN_JOIN_TIMEOUT", "5")
    assert cli.main(["run", "--dry-run", PLAIN]) == 0, capsys.readouterr().err


# ---- other verbs: a flag another flag makes meaningless is refused ----


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["submit", "--dry-run", "--wait", PLAIN], "--wait with --dry-run"),
        (["verify", "--json", "--timeline", "."], "--timeline prints a table, not JSON"),
        (["stacks", "--json", "--full", "."], "--full is for the text report"),
    ],
)
def test_a_flag_that_would_be_ignored_is_refused(
    argv: list[str],
    message: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", "/nonexistent")
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "hint: " in err and len(err.strip().splitlines()) == 1, err


def test_both_node_spellings_are_config_keys_and_variables(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", "/nonexistent")
    (tmp_path / "noderun.toml").write_text("[submit]\nnnodes = 3\n[run]\nnodes = 2\n")
    assert cli.main(["submit", "--dry-run", PLAIN]) == 0, capsys.readouterr().err
    assert "--nnodes=3" in capsys.readouterr().out
    assert cli.main(["run", "--dry-run", PLAIN]) == 0, capsys.readouterr().err
    assert "--nnodes=2" in capsys.readouterr().out
    monkeypatch.setenv("NODERUN_NODES", "4")  # the variable beats the file, in either spelling
    assert cli.main(["run", "--dry-run", PLAIN]) == 0, capsys.readouterr().err
    assert "--nnodes=4" in capsys.readouterr().out
