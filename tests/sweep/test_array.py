"""The job array of `noderun sweep --submit`, pure text, then really run by bash: task i runs
point i's `noderun run` (hostile arguments intact), its console in the point's run directory."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from noderun.plan.array import array_plan
from noderun.plan.sbatch import SbatchPlan, SubmitRequest
from noderun.sweep.grid import expand, parse_param, point_args

FAKE_PYTHON = f"#!{sys.executable}\nimport json, sys\nprint(json.dumps(sys.argv[1:]))\n"


def _plans(
    tmp_path: Path, args: list[str], todo: slice = slice(None)
) -> list[tuple[int, SbatchPlan]]:
    python = tmp_path / "python"
    python.write_text(FAKE_PYTHON)
    python.chmod(0o755)
    points = expand([parse_param("lr=0.1,0.2"), parse_param("tag=a b,$(x)")])[todo]
    return [
        (p.index, SubmitRequest(
            script="/s/train.py", run_dir=tmp_path / p.name, workdir=tmp_path,
            script_args=tuple(point_args(args, p)), nodes=2, requeue=True,
            signal="USR1@90", python=str(python), run_flags=("--notify=cat > x",),
        ).materialize())
        for p in points
    ]  # fmt: skip


def test_the_array_script_takes_the_points_options_and_adds_array_and_requeue(
    tmp_path: Path,
) -> None:
    text = str(array_plan(_plans(tmp_path, []), 2, tmp_path, "sweep-train"))
    lines = text.splitlines()
    assert "#SBATCH --array=0-3%2" in lines and "#SBATCH --nodes=2" in lines
    assert "#SBATCH --signal=USR1@90" in lines and "#SBATCH --requeue" in lines
    assert f"#SBATCH --output={tmp_path}/logs/array-%A_%a.out" in lines
    assert sum(line.startswith("#SBATCH --job-name=") for line in lines) == 1
    assert not any("slurm-%j.out" in line for line in lines)  # the point's console: below
    subprocess.run(["bash", "-n"], input=text, text=True, check=True)


def test_a_rerun_array_lists_only_the_points_left(tmp_path: Path) -> None:
    plans = _plans(tmp_path, [], slice(1, 4, 2))
    assert array_plan(plans, 1, tmp_path, "s").array_spec == "1,3%1"
    assert array_plan(plans[:1], 1, tmp_path, "s").array_spec == "1%1"


@pytest.mark.parametrize("task", [1, 2])
def test_task_i_runs_point_i_with_its_arguments_byte_for_byte(tmp_path: Path, task: int) -> None:
    plans = _plans(tmp_path, ["--tag={tag}", "it's"])
    script = tmp_path / "array.sbatch"
    script.write_text(str(array_plan(plans, 2, tmp_path, "sweep-train")))
    run_dir = plans[task][1].request.run_dir
    (run_dir / "logs").mkdir(parents=True)
    env = {"PATH": "/usr/bin:/bin", "SLURM_ARRAY_TASK_ID": str(task), "SLURM_JOB_ID": "55"}
    subprocess.run(["bash", str(script)], env=env, check=True, cwd=tmp_path)
    argv = json.loads((run_dir / "logs" / "slurm-55.out").read_text())
    tag = ("a b", "$(x)")[task % 2]
    assert argv[argv.index("/s/train.py") :] == ["/s/train.py", f"--tag={tag}", "it's", "--lr",
                                                  ("0.1", "0.2")[task // 2]]  # fmt: skip
    assert f"--run-dir={run_dir}" in argv and "--notify=cat > x" in argv
    assert not (tmp_path / "x").exists()


def test_an_unknown_task_exits_2(tmp_path: Path) -> None:
    script = tmp_path / "array.sbatch"
    script.write_text(str(array_plan(_plans(tmp_path, []), 2, tmp_path, "s")))
    env = {"PATH": "/usr/bin:/bin", "SLURM_ARRAY_TASK_ID": "9", "SLURM_JOB_ID": "5"}
    done = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True)
    assert done.returncode == 2 and "no point for array task 9" in done.stderr


def test_an_array_task_is_known_by_its_array_id_and_index() -> None:
    from noderun.backends.slurm_text import JobRecord
    from noderun.topology import slurm_job_id

    task = {"SLURM_JOB_ID": "51", "SLURM_ARRAY_JOB_ID": "50", "SLURM_ARRAY_TASK_ID": "1"}
    assert slurm_job_id(task) == "50_1" and slurm_job_id({"SLURM_JOB_ID": "7"}) == "7"
    assert (
        JobRecord("51", {"ArrayJobId": "50", "ArrayTaskId": "1"}, "scontrol").array_task == "50_1"
    )
    assert JobRecord("51", {"JobID": "50_1"}, "sacct").array_task == "50_1"
    assert JobRecord("7", {"JobID": "7"}, "sacct").array_task is None


@pytest.mark.parametrize("asked", ["50_1", "51"])  # the task's <array>_<index>, or its own id
def test_status_and_logs_of_an_array_task_find_its_point(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], asked: str
) -> None:
    from noderun import cli
    from noderun.backends import slurm
    from noderun.backends.slurm_text import JobRecord

    out = tmp_path / "sweep"
    for index, name in enumerate(["lr=0.1", "lr=0.2"]):
        (out / name / "logs").mkdir(parents=True)
        record = {"backend": "slurm", "status": "completed", "job_id": f"50_{index}"}
        (out / name / "run.json").write_text(json.dumps(record, indent=2))
        (out / name / "logs" / "rank0.log").write_text(f"point {name}\n")
    fields = {"ArrayJobId": "50", "ArrayTaskId": "1", "JobState": "COMPLETED",
              "StdOut": str(out / "logs" / "array-50_1.out"), "WorkDir": str(tmp_path)}  # fmt: skip
    monkeypatch.setattr(slurm, "available", lambda: True)
    monkeypatch.setattr(slurm, "job_record", lambda job: JobRecord("51", fields, "scontrol"))
    monkeypatch.chdir(tmp_path)
    assert cli.main(["logs", asked]) == 0
    assert capsys.readouterr().out == "point lr=0.2\n"
    assert cli.main(["status", "--json", asked]) == 0
    seen = json.loads(capsys.readouterr().out)
    assert (seen["run_dir"], seen["job_id"]) == (str(out / "lr=0.2"), "50_1"), seen
