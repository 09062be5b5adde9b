"""torchrun's flags on `noderun run`/`submit`: each mapped as torchrun documents it, or refused
in one line naming what to use, before anything starts."""

from __future__ import annotations

import argparse
import json
import shlex
from pathlib import Path

import pytest

from noderun import cli
from noderun.errors import UsageError
from noderun.outcome import Outcome, restart_refusal
from noderun.plan.launch import RANK_ENTRY, Entry
from noderun.run_record import RunRecord
from noderun.verbs.torchrun_flags import (
    check_program,
    nnodes_spec,
    nproc_spec,
    resolve_nproc,
    std_spec,
)
from tests.conftest import SCRIPTS

PLAIN = str(SCRIPTS / "plain_torch.py")


@pytest.mark.parametrize(
    ("spec", "cpus", "gpus", "expected"),
    [(3, 8, 0, 3), ("cpu", 8, 4, 8), ("gpu", 8, 4, 4), ("auto", 8, 4, 4), ("auto", 8, 0, 8),
     ("auto", 8, None, 8)],
)  # fmt: skip
def test_nproc_per_node_words_resolve_as_torchrun(
    spec: int | str, cpus: int, gpus: int | None, expected: int
) -> None:
    assert resolve_nproc(spec, cpus, gpus) == expected


def test_nproc_gpu_without_a_gpu_is_one_line() -> None:
    with pytest.raises(UsageError, match=r"no GPU is visible here.*cpu/auto"):
        resolve_nproc("gpu", 8, 0)


@pytest.mark.parametrize("text", ["0", "-1", "two", "xpu", "gpus"])
def test_bad_nproc_values_are_refused(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        nproc_spec(text)


def test_nnodes_takes_a_fixed_min_max_only() -> None:
    assert nnodes_spec("2") == 2 and nnodes_spec("2:2") == 2
    with pytest.raises(argparse.ArgumentTypeError, match="fixed number of nodes"):
        nnodes_spec("1:4")


def test_std_spec_reads_torchruns_format() -> None:
    assert std_spec("3") == 3 and std_spec("0:3,1:0") == {0: 3, 1: 0}
    for bad in ("4", "a", "0:9"):
        with pytest.raises(argparse.ArgumentTypeError):
            std_spec(bad)


def test_programs_are_checked_without_importing(tmp_path: Path) -> None:
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    (tmp_path / "pkg" / "__init__.py").write_text("raise SystemExit('imported!')\n")
    (tmp_path / "pkg" / "sub" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "sub" / "train.py").write_text("")
    assert check_program("pkg.sub.train", Entry.MODULE, tmp_path) == "pkg.sub.train"
    assert check_program("timeit", Entry.MODULE, tmp_path) == "timeit"
    for missing in ("pkg.sub.nope", "nope", "pkg.sub.train.deeper", ""):
        with pytest.raises(UsageError, match="not found"):
            check_program(missing, Entry.MODULE, tmp_path)
    assert check_program("echo", Entry.EXECUTABLE) == "echo"
    with pytest.raises(UsageError, match="not found or not executable"):
        check_program(str(tmp_path / "pkg" / "__init__.py"), Entry.EXECUTABLE)


REFUSED = [
    (["-m", "--no-python", "x"], "--module and --no-python together"),
    (["--rdzv-backend", "etcd", PLAIN], "--rdzv-backend etcd is not used"),
    (["--rdzv-conf", "last_call_timeout=5", PLAIN], "rdzv-conf last_call_timeout has no"),
    (["--rdzv-endpoint", "elsewhere:29500", PLAIN], "puts the rendezvous on node 0"),
    (["--rdzv-endpoint", "nocolon", PLAIN], "is not HOST:PORT"),
    (["--redirects", "1", PLAIN], "splitting stdout from stderr is not supported"),
    (["--standalone", "--nnodes", "2", PLAIN], "--standalone runs one node"),
    (["--log-dir", "L", "--run-dir", "R", PLAIN], "--log-dir and --run-dir together"),
    (["-m", "no.such.module"], "module 'no.such.module' not found"),
    (["--no-python", "no-such-exe"], "executable 'no-such-exe' not found"),
    (["--nproc-per-node", "gpu", PLAIN], "no GPU is visible here"),
    (["--nnodes", "1:2", PLAIN], "no elastic MIN:MAX"),
    (["--local-ranks-filter", "a", PLAIN], "comma-separated list of local ranks"),
    (["--max-restarts", "-1", PLAIN], "must be 0 or more"),
]


@pytest.mark.parametrize(("extra", "message"), REFUSED, ids=[m for _, m in REFUSED])
def test_refused_flags_are_one_line_and_start_nothing(
    extra: list[str],
    message: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    try:
        code = cli.main(["run", *extra])
    except SystemExit as stop:  # argparse's own refusal (the type's message)
        code = stop.code  # type: ignore[assignment]
    err = capsys.readouterr().err
    assert code == 2 and message in err, err
    assert len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "runs").exists() and not (tmp_path / "R").exists()


def _dry_run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> list[list[str]]:
    assert cli.main(["run", "--dry-run", *argv]) == 0
    lines = capsys.readouterr().out.splitlines()
    return [shlex.split(line) for line in lines if "torch.distributed.run" in line]


def test_module_and_no_python_go_through_the_rank_entry(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    [agent] = _dry_run(["--standalone", "-m", "timeit", "-n", "1"], capsys)
    assert agent[-5:] == [RANK_ENTRY, "--module", "timeit", "-n", "1"]
    [agent] = _dry_run(["--no-python", "echo", "a b"], capsys)
    assert agent[-4:] == [RANK_ENTRY, "--no-python", "echo", "a b"]
    agents = _dry_run(["--nnodes", "2:2", "--rdzv-id", "mine", PLAIN], capsys)
    assert len(agents) == 2 and all("--rdzv-id=mine" in a for a in agents)


def test_log_dir_is_the_root_of_a_new_run_dir(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    [agent] = _dry_run(["--log-dir", "logs-here", "--tee", "3", PLAIN], capsys)
    log_dir = next(a for a in agent if a.startswith("--log-dir="))
    assert log_dir.startswith(f"--log-dir={tmp_path}/logs-here/plain_torch-")


def test_submit_passes_torchrun_flags_to_the_job(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", "/nonexistent")  # no sinfo: the dry run checks no cluster
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "train.py").write_text("")
    argv = ["submit", "--dry-run", "--nodes", "2", "--gpus-per-node", "4", "--nproc-per-node",
            "gpu", "--max-restarts", "2", "--local-ranks-filter", "0", "-m", "pkg.train",
            "x y"]  # fmt: skip
    assert cli.main(argv) == 0
    script = capsys.readouterr().out
    assert "#SBATCH --job-name=train" in script
    run = next(shlex.split(line) for line in script.splitlines() if line.startswith("exec "))
    assert "--nproc-per-node=4" in run and "--max-restarts=2" in run
    assert run[-4:] == ["--local-ranks-filter=0", "--module", "pkg.train", "x y"]
    assert cli.main([*argv[:6], "--nproc-per-node", "cpu", "-m", "pkg.train"]) == 2
    assert "nodes are not known before the job starts" in capsys.readouterr().err


def test_restart_policy_table() -> None:
    failed = Outcome(1.0, failure="rank 1 failed: exit code 1", failure_exit=1, failure_rank=1)
    other = Outcome(1.0, failure="rank 0 failed: killed by SIGKILL", failure_exit=-9)
    bad = Outcome(1.0, failure="rank 0 failed: exit code 2", failure_exit=2)
    assert restart_refusal(failed, None, 0, 2) is None
    assert restart_refusal(other, failed, 1, 2) is None  # a different failure: try again
    assert restart_refusal(failed, failed, 1, 2) == "the same failure as the previous attempt"
    assert "bad input" in (restart_refusal(bad, None, 0, 2) or "")
    assert "used up" in (restart_refusal(failed, None, 2, 2) or "")
    assert restart_refusal(Outcome(1.0), None, 0, 2) == "completed"
    assert restart_refusal(Outcome(1.0, interrupted_by="SIGINT"), None, 0, 2)
    record = RunRecord(backend="local")
    record.end(failed, "t")
    assert json.dumps(record.to_json())  # what run.json gets stays serialisable


@pytest.mark.slow
def test_a_restart_stays_in_the_run_directory_it_made(tmp_path: Path) -> None:
    from tests.conftest import noderun

    script = tmp_path / "fail.py"
    script.write_text("import os, sys\nsys.exit(3 if os.environ['RANK'] == '0' else 0)\n")
    result = noderun(["run", "--max-restarts", "1", str(script)], cwd=tmp_path)
    assert result.returncode == 1, result.stderr[-2000:]
    [run_dir] = list((tmp_path / "runs").iterdir())  # no second directory for the restart
    record = json.loads((run_dir / "run.json").read_text())
    assert record["restart"] == "not restarted: --max-restarts 1 used up"
    assert [a["restart"] for a in record["attempts"]] == ["restarted the gang (restart 1 of 1)"]
    assert record["restart_count"] == 1
