"""`noderun completion bash|zsh`: scripts generated from the verbs' parsers, checked by the shells
themselves (bash completes through the real function; zsh lists through a pseudo-terminal)."""

from __future__ import annotations

import argparse
import shutil
import subprocess
from pathlib import Path

import pytest

from noderun import cli

BASH = shutil.which("bash")


def _script(shell: str, capsys: pytest.CaptureFixture[str]) -> str:
    assert cli.main(["completion", shell]) == 0
    return capsys.readouterr().out


def _complete(script: Path, words: list[str]) -> list[str]:
    """What bash offers for the last of ``words`` (COMP_WORDS), through _noderun."""
    assert BASH is not None
    quoted = " ".join(f"'{w}'" for w in words)
    program = (
        f"source '{script}'\n"
        f"COMP_WORDS=({quoted}); COMP_CWORD={len(words) - 1}; _noderun\n"
        'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    done = subprocess.run([BASH, "-c", program], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


@pytest.mark.skipif(BASH is None, reason="bash is not installed")
def test_bash_accepts_the_script_and_completes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "noderun.bash"
    script.write_text(_script("bash", capsys))
    checked = subprocess.run([BASH, "-n", str(script)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr
    assert _complete(script, ["noderun", "ru"]) == ["run"]
    assert _complete(script, ["noderun", "s"]) == ["submit", "stacks", "scale", "status", "sweep"]
    assert _complete(script, ["noderun", "comp"]) == ["completion"]
    assert _complete(script, ["noderun", "run", "--nn"]) == ["--nnodes"]
    assert _complete(script, ["noderun", "run", "--mode", ""]) == ["torchrun", "srun"]
    assert "core-complex" in _complete(script, ["noderun", "run", "--numa-binding", ""])
    assert _complete(script, ["noderun", "submit", "--wa"]) == ["--wait"]
    assert _complete(script, ["noderun", "doctor", "--node"]) == ["--nodes", "--node-rank"]
    assert _complete(script, ["noderun", "run", "--nnodes", ""]) == []  # a number: no guess
    (tmp_path / "train.py").write_text("")
    offered = _complete(script, ["noderun", "run", str(tmp_path / "tr")])
    assert offered == [str(tmp_path / "train.py")]


def test_every_option_of_every_verb_completes(capsys: pytest.CaptureFixture[str]) -> None:
    """Generated from the parsers: an option added to a verb completes with no other change."""
    bash, zsh = _script("bash", capsys), _script("zsh", capsys)
    bash_words = set(bash.replace('"', " ").split())
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for verb, verb_parser in sub.choices.items():
        assert f"        {verb})" in bash and f"'{verb}:" in zsh
        for action in verb_parser._actions:
            if action.help == argparse.SUPPRESS:
                continue
            for flag in action.option_strings:
                if "_" in flag:  # the --under_score twin is accepted, not offered
                    continue
                assert flag in bash_words and flag in zsh, f"{verb} {flag}"


def test_an_unknown_shell_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["completion", "fish"]) == 2
    err = capsys.readouterr().err
    assert "no completion for shell 'fish'" in err and "bash, zsh" in err
    assert len(err.strip().splitlines()) == 1


ZSH_DRIVER = r"""
zmodload zsh/zpty
zpty z 'zsh -f -i'
zpty -w z "PS1='%% '; fpath=($1 \$fpath); autoload -Uz compinit; compinit -u -d $1/.zcompdump; noderun() { : }"
zpty -wn z $'noderun \t\t'
zpty -r z out '*verify*' && print verbs-listed
zpty -wn z $'\C-unoderun run --mode \t\t'
zpty -r z out '*torchrun*' && print choices-listed
zpty -d z
"""  # noqa: E501  (zsh waits for each listing: the reads block until the pattern shows)


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed")
def test_zsh_accepts_the_script_and_completes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    zsh = shutil.which("zsh")
    assert zsh is not None
    (tmp_path / "_noderun").write_text(_script("zsh", capsys))
    checked = subprocess.run([zsh, "-n", str(tmp_path / "_noderun")], capture_output=True)
    assert checked.returncode == 0, checked.stderr
    driver = tmp_path / "driver.zsh"
    driver.write_text(ZSH_DRIVER)
    done = subprocess.run(
        [zsh, "-f", str(driver), str(tmp_path)], capture_output=True, text=True, timeout=60
    )
    assert done.stdout.split() == ["verbs-listed", "choices-listed"], done.stderr
