"""The rendered sbatch script: golden files, quoting proven by bash itself, bad values refused.

Set NODERUN_UPDATE_GOLDEN=1 to rewrite the golden files after an intended change.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
from pathlib import Path

import pytest

from noderun.errors import UsageError
from noderun.plan.sbatch import SubmitRequest
from noderun.plan.slurm import LaunchMode

GOLDEN = Path(__file__).parent / "golden"
HOSTILE = (
    "two words",
    "it's",
    'say "hi"',
    "a; touch /tmp/noderun-pwned",
    "$(touch /tmp/noderun-pwned)",
    "`touch /tmp/noderun-pwned`",
    "line one\nline two",
    "$HOME",
    "*",
    "back\\slash",
    "",
    "--nnodes=9",
)

BASE = SubmitRequest(
    script="/shared/proj/train.py",
    run_dir=Path("/shared/runs/train-1"),
    workdir=Path("/shared/proj"),
    script_args=("--epochs", "2"),
    nodes=2,
    nproc_per_node=2,
    python="/shared/venv/bin/python",
)

CASES = {
    "torchrun_2x2": BASE,
    "srun_all_options": dataclasses.replace(
        BASE,
        mode=LaunchMode.SRUN,
        nodes=3,
        nproc_per_node=4,
        partition="gpu",
        account="proj-42",
        time="1-02:00:00",
        cpus_per_task=8,
        mem="64G",
        gpus_per_node=4,
        job_name="my.job",
        env=(("NCCL_DEBUG", "INFO"), ("GREETING", "hello world")),
        setup="source /shared/venv/bin/activate\nmodule load cuda",
        requeue=True,
        signal="USR1@90",
        master_port=29400,
        join_timeout=45,
    ),
    "hostile_args": dataclasses.replace(BASE, script_args=HOSTILE, env=(("X", "$(id); `id`"),)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_script_matches_golden_file(name: str) -> None:
    text = str(CASES[name].materialize())
    golden = GOLDEN / f"{name}.sbatch"
    if os.environ.get("NODERUN_UPDATE_GOLDEN"):
        golden.parent.mkdir(exist_ok=True)
        golden.write_text(text)
    assert text == golden.read_text()


def test_dry_run_text_has_the_topology_table() -> None:
    text = CASES["srun_all_options"].materialize().dry_run_text()
    assert text.startswith("#!/bin/bash\n")
    table = text.split("\n\n")[-1].splitlines()
    assert table[0].split() == ["node", "host", "ranks", "local", "ranks"]
    assert [row.split()[::2] for row in table[1:]] == [["0", "0-3"], ["1", "4-7"], ["2", "8-11"]]
    assert all(row.split()[-1] == "0-3" for row in table[1:])


def test_directives_follow_the_mode() -> None:
    torchrun = CASES["torchrun_2x2"].materialize().directives()
    assert "#SBATCH --ntasks-per-node=1" in torchrun
    assert "#SBATCH --cpus-per-task=2" in torchrun  # one agent per node runs both ranks
    srun = CASES["srun_all_options"].materialize().directives()
    assert "#SBATCH --ntasks-per-node=4" in srun
    assert "#SBATCH --cpus-per-task=8" in srun
    assert "#SBATCH --requeue" in srun


def _words_bash_sees(script: str, tmp_path: Path) -> list[str]:
    """Run the script's final ``exec`` line under bash with printf in place of exec."""
    command = script[script.rindex("\nexec ") + len("\nexec ") :]
    probe = tmp_path / "probe.sh"
    probe.write_text("printf '%s\\0' " + command)
    out = subprocess.run(["bash", str(probe)], capture_output=True, check=True, cwd=tmp_path)
    return out.stdout.decode().split("\0")[:-1]


def test_bash_receives_hostile_arguments_byte_for_byte(tmp_path: Path) -> None:
    plan = CASES["hostile_args"].materialize()
    words = _words_bash_sees(str(plan), tmp_path)
    assert words == plan.run_argv()
    assert tuple(words[-len(HOSTILE) :]) == HOSTILE
    assert not Path("/tmp/noderun-pwned").exists()


def test_bash_accepts_the_whole_script(tmp_path: Path) -> None:
    for request in CASES.values():
        script = tmp_path / "job.sbatch"
        script.write_text(str(request.materialize()))
        subprocess.run(["bash", "-n", str(script)], check=True)


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"nodes": 0}, ["--nodes 0", "at least 1"]),
        ({"time": "90 minutes"}, ["--time", "HH:MM:SS"]),
        ({"time": "1:2:3:4"}, ["--time"]),
        ({"mem": "lots"}, ["--mem", "16G"]),
        ({"partition": "gpu queue"}, ["--partition", "cannot take"]),
        ({"job_name": "a\nb"}, ["--job-name"]),
        ({"signal": "USR1 @90"}, ["--signal", "USR1@90"]),
        ({"gpus_per_node": 1}, ["--nproc-per-node 2 > --gpus-per-node 1", "one process per GPU"]),
        ({"env": (("1BAD", "x"),)}, ["--env name '1BAD'"]),
        ({"run_dir": Path("/shared/my runs/x")}, ["run directory", "#SBATCH"]),
        ({"run_dir": Path("/shared/100%/x")}, ["run directory"]),
        ({"constraint": "a100 b"}, ["--constraint", "cannot carry"]),
        ({"qos": "$(id)"}, ["--qos", "cannot carry"]),
        ({"gres": "gpu:8;rm"}, ["--gres", "cannot carry"]),
        ({"sbatch_args": ("--comment=`id`",)}, ["--comment", "cannot carry"]),
        ({"sbatch_args": ("--mail-user=a b",)}, ["--mail-user", "cannot carry"]),
        ({"sbatch_args": ("--comment=x\n#SBATCH --nodes=9",)}, ["not --option"]),
        ({"sbatch_args": ("-p debug",)}, ["not --option or --option=value", "long form"]),
        ({"sbatch_args": ("--nodes=4",)}, ["noderun sets --nodes itself", "use --nodes"]),
        ({"sbatch_args": ("--output=x",)}, ["noderun sets --output", "--run-dir"]),
    ],
)
def test_bad_values_are_refused_with_a_hint(change: dict[str, object], words: list[str]) -> None:
    with pytest.raises(UsageError) as err:
        dataclasses.replace(BASE, **change).materialize()  # type: ignore[arg-type]
    message = str(err.value)
    assert "\n" not in message and "hint:" in message
    for word in words:
        assert word in message


@pytest.mark.parametrize("good", ["30", "30:00", "1:30:00", "2-0", "2-12:00", "2-12:00:00"])
def test_slurm_time_formats_are_accepted(good: str) -> None:
    assert f"#SBATCH --time={good}" in str(dataclasses.replace(BASE, time=good).materialize())


def test_extra_sbatch_options_become_directives_in_order() -> None:
    request = dataclasses.replace(
        BASE, gres="gpu:a100:8", exclusive=True, constraint="a100&(ib|roce)", qos="high",
        reservation="maint", exclude="node[3-4]", nodelist="node[1-2]",
        dependency="afterok:12:13", sbatch_args=("--mail-type=END", "--requeue-on-fail"),
    )  # fmt: skip
    lines = [line for line in str(request.materialize()).splitlines() if "#SBATCH" in line]
    assert lines[-10:] == [
        "#SBATCH --gres=gpu:a100:8", "#SBATCH --constraint=a100&(ib|roce)", "#SBATCH --qos=high",
        "#SBATCH --reservation=maint", "#SBATCH --exclude=node[3-4]",
        "#SBATCH --nodelist=node[1-2]", "#SBATCH --dependency=afterok:12:13",
        "#SBATCH --exclusive", "#SBATCH --mail-type=END", "#SBATCH --requeue-on-fail",
    ]  # fmt: skip
