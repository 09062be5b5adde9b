"""Option precedence: flag > NODERUN_* variable > noderun.toml [verb] table > default."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import SCRIPTS, noderun


def _nodes_in_plan(stdout: str) -> int:
    return stdout.count("torch.distributed.run")


def _dry_run(tmp_path: Path, *flags: str, **env: str) -> tuple[int, str, str]:
    result = noderun(["run", "--dry-run", *flags, str(SCRIPTS / "gang.py")], cwd=tmp_path, **env)
    return result.returncode, result.stdout, result.stderr


def test_precedence(tmp_path: Path) -> None:
    (tmp_path / "noderun.toml").write_text("[run]\nnnodes = 3\nnproc_per_node = 2\n")
    code, out, err = _dry_run(tmp_path)
    assert code == 0, err
    assert _nodes_in_plan(out) == 3 and "--nproc-per-node=2" in out  # file beats default
    code, out, _ = _dry_run(tmp_path, NODERUN_NNODES="2")
    assert _nodes_in_plan(out) == 2  # env beats file
    code, out, _ = _dry_run(tmp_path, "--nnodes", "1", NODERUN_NNODES="2")
    assert _nodes_in_plan(out) == 1  # flag beats env


def test_config_named_by_variable(tmp_path: Path) -> None:
    config = tmp_path / "elsewhere.toml"
    config.write_text("[run]\nnnodes = 4\n")
    code, out, err = _dry_run(tmp_path, NODERUN_CONFIG=str(config))
    assert code == 0, err
    assert _nodes_in_plan(out) == 4


def test_unknown_key_lists_the_valid_ones(tmp_path: Path) -> None:
    (tmp_path / "noderun.toml").write_text("[run]\nnnode = 3\n")
    code, out, err = _dry_run(tmp_path)
    assert code == 2 and out == ""
    assert "unknown option(s) nnode in [run]" in err
    assert "valid:" in err and "nnodes" in err and "nproc_per_node" in err


def test_bad_values_and_bad_files_are_one_line_errors(tmp_path: Path) -> None:
    (tmp_path / "noderun.toml").write_text("[run]\nnnodes = 0\n")
    code, _, err = _dry_run(tmp_path)
    assert code == 2 and "nnodes in [run]" in err and "at least 1" in err
    (tmp_path / "noderun.toml").write_text("[run\nnnodes = 2\n")
    code, _, err = _dry_run(tmp_path)
    assert code == 2 and "unreadable" in err and len(err.strip().splitlines()) == 1
    code, _, err = _dry_run(tmp_path, NODERUN_CONFIG=str(tmp_path / "missing.toml"))
    assert code == 2 and "NODERUN_CONFIG" in err
