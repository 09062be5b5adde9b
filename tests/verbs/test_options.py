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


def _submit_nodes(tmp_path: Path, *flags: str, **env: str) -> tuple[int, str]:
    result = noderun(["submit", "--dry-run", *flags, str(SCRIPTS / "gang.py")], cwd=tmp_path, **env)
    nodes = [line for line in result.stdout.splitlines() if line.startswith("#SBATCH --nodes=")]
    return result.returncode, (nodes[0].split("=")[1] if nodes else result.stderr)


def test_precedence_is_per_verb(tmp_path: Path) -> None:
    (tmp_path / "noderun.toml").write_text("[run]\nnnodes = 3\n[submit]\nnodes = 3\n")
    assert _submit_nodes(tmp_path) == (0, "3")  # file beats default
    assert _submit_nodes(tmp_path, NODERUN_NODES="2") == (0, "2")  # env beats file
    assert _submit_nodes(tmp_path, "--nodes", "1", NODERUN_NODES="2") == (0, "1")  # flag wins
    # NODERUN_NNODES is the same option's other spelling (--nnodes is --nodes)
    assert _submit_nodes(tmp_path, NODERUN_NNODES="2") == (0, "2")
    # run's table does not reach submit
    (tmp_path / "noderun.toml").write_text("[run]\nnnodes = 3\n")
    assert _submit_nodes(tmp_path) == (0, "1")


def test_bad_variable_breaks_only_the_verbs_that_read_it(tmp_path: Path) -> None:
    log = tmp_path / "rank0.log"
    log.write_text("epoch 1 loss 0.5\n")
    for argv in (["--help"], ["run", "--help"], ["explain", str(log)], ["verify", "--help"]):
        result = noderun(argv, cwd=tmp_path, NODERUN_NNODES="abc")
        assert result.returncode == 0, (argv, result.stderr)
    code, nodes = _submit_nodes(tmp_path, NODERUN_NNODES="abc")  # --nnodes is --nodes: read
    assert code == 2 and "NODERUN_NNODES='abc'" in nodes
    code, out, err = _dry_run(tmp_path, NODERUN_NNODES="abc")
    assert code == 2 and out == ""
    assert err.strip() == (
        "noderun: error: NODERUN_NNODES='abc': 'abc' is not a whole number; "
        "hint: fix or unset NODERUN_NNODES"
    )
    code, out, _ = _dry_run(tmp_path, "--nnodes", "2", NODERUN_NNODES="abc")
    assert code == 0 and _nodes_in_plan(out) == 2  # the flag wins, so the variable is not read


def test_bad_config_breaks_only_the_verbs_that_read_it(tmp_path: Path) -> None:
    log = tmp_path / "rank0.log"
    log.write_text("epoch 1 loss 0.5\n")
    missing = str(tmp_path / "missing.toml")
    assert noderun(["explain", str(log)], cwd=tmp_path, NODERUN_CONFIG=missing).returncode == 0
    result = noderun(["submit", "--dry-run", "x.py"], cwd=tmp_path, NODERUN_CONFIG=missing)
    assert result.returncode == 2 and "NODERUN_CONFIG" in result.stderr


def test_unknown_key_of_another_verb_lists_its_valid_ones(tmp_path: Path) -> None:
    (tmp_path / "noderun.toml").write_text("[submit]\nhosts = 'a,b'\n")  # run's, not submit's
    code, err = _submit_nodes(tmp_path)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "unknown option(s) hosts in [submit]" in err
    assert "valid: account, constraint, cpus_per_task," in err and "nodes" in err
    assert _dry_run(tmp_path)[0] == 0  # [submit] is not run's business
