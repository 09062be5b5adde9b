"""The option table on its own: parser from the table, resolution after parsing, help."""

from __future__ import annotations

import argparse
import enum
from pathlib import Path

import pytest

from noderun import cli
from noderun.errors import UsageError
from noderun.verbs.options import (
    SCRIPT_ARGUMENTS,
    OptionTable,
    add_verb,
    config_section,
    positive_int,
    repeated,
    switch,
    value,
)


class Color(enum.StrEnum):
    RED = "red"
    BLUE = "blue"


TABLE = OptionTable(
    "paint",
    (
        value("-n", "--coats", type=positive_int, default=1, help="coats"),
        value("--color", type=Color, default=Color.RED, help="color"),
        value("--brush", env=False, help="brush (command line only)"),
        switch("--dry", env=True, help="no paint"),
        repeated("--tag", help="a tag"),
        *SCRIPT_ARGUMENTS,
    ),
)


def _parse(
    argv: list[str], environ: dict[str, str], section: dict[str, object]
) -> dict[str, object]:
    parser = argparse.ArgumentParser(prog="noderun")
    add_verb(parser.add_subparsers(), TABLE, lambda args: 0, help="", description="")
    args = parser.parse_args(["paint", *argv])
    TABLE.resolve(args, environ, section, "[paint] of noderun.toml")
    internal = ("handler", "option_table", "given_options")
    return {k: v for k, v in vars(args).items() if k not in internal}


def test_defaults_and_positionals() -> None:
    got = _parse(["job.py", "--lr", "1"], {}, {})
    assert got == {
        "coats": 1,
        "color": Color.RED,
        "brush": None,
        "dry": False,
        "tag": [],
        "script": "job.py",
        "script_args": ["--lr", "1"],
    }


@pytest.mark.parametrize(
    ("argv", "environ", "section", "coats"),
    [
        ([], {}, {"coats": 3}, 3),  # file beats default
        ([], {"NODERUN_COATS": "2"}, {"coats": 3}, 2),  # variable beats file
        ([], {"NODERUN_COATS": ""}, {"coats": 3}, 3),  # an empty variable is unset
        (["-n", "4"], {"NODERUN_COATS": "2"}, {"coats": 3}, 4),  # short flag beats all
        (["--coats", "5"], {"NODERUN_COATS": "x"}, {"coats": 0}, 5),  # bad sources not read
    ],
)
def test_precedence(
    argv: list[str], environ: dict[str, str], section: dict[str, object], coats: int
) -> None:
    assert _parse([*argv, "job.py"], environ, section)["coats"] == coats


def test_switches_read_booleans_and_lists_are_fresh() -> None:
    assert _parse(["job.py"], {"NODERUN_DRY": "yes"}, {})["dry"] is True
    assert _parse(["job.py"], {}, {"dry": True})["dry"] is True
    assert _parse(["--dry", "job.py"], {"NODERUN_DRY": "0"}, {})["dry"] is True
    first = _parse(["job.py"], {}, {})["tag"]
    assert first == [] and first is not _parse(["job.py"], {}, {})["tag"]
    assert _parse(["--tag", "a", "--tag", "b", "job.py"], {}, {})["tag"] == ["a", "b"]
    assert _parse(["job.py"], {}, {"color": "blue"})["color"] is Color.BLUE


@pytest.mark.parametrize(
    ("environ", "section", "message"),
    [
        ({"NODERUN_COATS": "0"}, {}, "NODERUN_COATS='0': 0 must be at least 1; hint: fix or unset"),
        ({}, {"color": "green"}, "color in [paint] of noderun.toml='green': 'green' is not one of"),
        ({"NODERUN_DRY": "maybe"}, {}, "NODERUN_DRY='maybe': 'maybe' is not one of 1, true"),
        ({}, {"brush": "flat"}, "unknown option(s) brush in [paint] of noderun.toml; hint: "
         "valid: coats, color, dry"),
        ({"NODERUN_BRUSH": "flat"}, {}, ""),  # not settable: the variable means nothing here
    ],
)  # fmt: skip
def test_bad_sources_are_one_line_errors(
    environ: dict[str, str], section: dict[str, object], message: str
) -> None:
    if not message:
        assert _parse(["job.py"], environ, section)["brush"] is None
        return
    with pytest.raises(UsageError) as err:
        _parse(["job.py"], environ, section)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_config_section_errors(tmp_path: Path) -> None:
    config = tmp_path / "noderun.toml"
    config.write_text("paint = 3\n")
    with pytest.raises(UsageError, match=r"\[paint\] in .* is not a table"):
        config_section("paint", config)
    assert config_section("paint", None) == {}


@pytest.mark.parametrize("verb", [[], *([v] for v in cli.VERBS)])
def test_help_always_works(
    verb: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "noderun.toml").write_text("[run\n")  # unreadable
    for name in ("NNODES", "NODES", "NPROC_PER_NODE", "MODE", "JOIN_TIMEOUT", "MASTER_PORT"):
        monkeypatch.setenv(f"NODERUN_{name}", "abc")
    with pytest.raises(SystemExit) as done:
        cli.main([*verb, "--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: noderun {' '.join(verb)}".rstrip())


def test_top_level_help_is_for_users(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    out = capsys.readouterr().out
    assert "parse, call one verb" not in out
    assert "launches multi-node PyTorch training" in out
    for verb in cli.VERBS:  # each verb on a line of its own, with its one-line help
        assert any(
            line.split()[:1] == [verb] and len(line.split()) > 1 for line in out.splitlines()
        )
