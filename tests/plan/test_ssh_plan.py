"""Pure parts of the SSH backend: hostfiles, slots, the ranks' environment, quoting, refusals."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from noderun.backends.ssh import _refusal
from noderun.errors import UsageError
from noderun.plan.launch import Gang
from noderun.plan.ssh import (
    forwarded_env,
    hosts_and_slots,
    parse_hostfile,
    plan_ssh,
    remote_command,
)


def test_hostfile_lines_comments_and_slots() -> None:
    text = "# cluster\n\nnode-a slots=4\nnode-b   slots=4 # spare\nnode-c\n"
    assert parse_hostfile(text) == [("node-a", 4), ("node-b", 4), ("node-c", None)]


@pytest.mark.parametrize("text", ["a slots=x\n", "a gpus=2\n", "# nothing\n", ""])
def test_bad_hostfile_is_one_line(text: str) -> None:
    with pytest.raises(UsageError) as err:
        parse_hostfile(text, "hosts.txt")
    assert "hosts.txt" in str(err.value) and "\n" not in str(err.value)


def test_slots_give_the_processes_per_host_unless_asked() -> None:
    assert hosts_and_slots([("a", 2), ("b", 2)], None) == (["a", "b"], 2)
    assert hosts_and_slots([("a", 2), ("b", 2)], 1) == (["a", "b"], 1)
    assert hosts_and_slots([("a", None)], None) == (["a"], 1)
    with pytest.raises(UsageError, match="different slots"):
        hosts_and_slots([("a", 2), ("b", 4)], None)
    with pytest.raises(UsageError, match="listed twice"):
        hosts_and_slots([("a", 2), ("a", 2)], None)


def test_only_allow_listed_variables_reach_the_ranks() -> None:
    env = {"NCCL_SOCKET_IFNAME": "eth0", "SECRET_TOKEN": "x", "HOME": "/root", "PYTHONPATH": "p"}
    assert forwarded_env(env) == {"NCCL_SOCKET_IFNAME": "eth0", "PYTHONPATH": "p"}


def test_remote_command_splits_back_into_the_same_words() -> None:
    argv = ["torchrun", "a b", "$(id)", "'\"", "", "x;y", "  two  spaces "]
    env = {"K": "v w", "Q": "$HOME `id`"}
    words = shlex.split(remote_command(argv, env, "/my dir", "/py thon", None))
    assert words[:6] == ["cd", "/my dir", "&&", "exec", "env", "K=v w"]
    assert words[6] == "Q=$HOME `id`"
    assert words[7:] == argv
    guarded = shlex.split(remote_command(argv, env, "/my dir", "/py thon", "/g.py"))
    assert guarded == ["cd", "/my dir", "&&", "exec", "/py thon", "/g.py", "--env-stdin", "--",
                       *argv]  # fmt: skip  # the variables go on the guard's stdin


def test_plan_puts_the_master_on_the_first_host() -> None:
    gang = Gang(
        nnodes=2,
        nproc_per_node=2,
        master_addr="h0",
        master_port=1234,
        run_dir=Path("/runs/r"),
        script="/s.py",
        script_args=("--x",),
        run_id="r",
        python="/py",
    )
    env = {"A": "1", "HF_TOKEN": "hf_s3cr3t", "OPT": "given-with-env"}
    plan = plan_ssh(gang, ["h0", "h1"], cwd="/w", guard="/g.py", env=env, hidden=["OPT"])
    assert plan.world_size == 4 and plan.master_addr == "h0"
    second = plan.nodes[1]
    assert second.remote and second.prefix == "h1" and second.argv[0] == "ssh"
    assert second.argv[-2] == "h1"
    remote = shlex.split(second.argv[-1])
    assert "--master-addr=h0" in remote and "--node-rank=1" in remote
    assert second.stdin_env["NODERUN__RUN_DIR"] == "/runs/r" and second.stdin_env["A"] == "1"
    assert second.stdin_env["HF_TOKEN"] == "hf_s3cr3t"
    shown = str(plan)  # what --dry-run prints
    for word in ("hf_s3cr3t", "given-with-env"):
        assert all(word not in part for part in second.argv) and word not in shown
    assert "HF_TOKEN=***" in shown and "OPT=***" in shown and "A=1" in shown


@pytest.mark.parametrize(
    ("said", "expected"),
    [
        ("nodir", "host h has no directory /w"),
        ("nopython", "host h has no interpreter /py"),
        ("missing torch", "host h: /py cannot import torch"),
        ("port-taken", "port 99 is taken on the master host h"),
        ("ssh: Permission denied (publickey).", "host h: ssh failed: Permission denied"),
    ],
)
def test_each_refusal_names_the_host_and_a_fix(said: str, expected: str) -> None:
    error = _refusal("h", said, "/w", "/py", 99)
    assert expected in str(error) and error.hint
