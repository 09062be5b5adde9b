"""End to end on the real Slurm lab: noderun submit, noderun run inside salloc, both modes,
2 and 3 nodes, concurrent jobs on shared nodes, hostile arguments, failures that end fast.
Jobs are shared between assertions to keep the lab time short."""

from __future__ import annotations

import re
import socket
import subprocess
import time
from pathlib import Path

import pytest

from noderun.backends.slurm import job_state
from tests.conftest import ROOT, clean_env, cli, noderun
from tests.docs.test_snippets import run_snippet_of
from tests.slurm.lab import (
    CLASSIFIER,
    PYTHON,
    WORKLOADS,
    contract_lines,
    job_id_of,
    read_json,
    require_lab,
    salloc,
    wait,
)

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

HOSTILE = [
    "two words",
    "it's",
    'say "hi"',
    "a; touch {pwned}",
    "$(touch {pwned})",
    "`touch {pwned}`",
    "line one\nline two",
    "$HOME",
    "*",
    "",
    "--",
    "--nnodes=9",
]
RANK_LINE = re.compile(r"\d+:\d+\| ")


@pytest.fixture(autouse=True)
def _lab() -> None:
    require_lab()


def _check_classifier_run(run_dir: Path, world: int, nodes: int) -> dict[str, object]:
    run = read_json(run_dir / "run.json")
    assert run["status"] == "completed" and run["backend"] == "slurm", run
    hosts = run["hosts"]
    assert isinstance(hosts, list) and len(set(hosts)) == nodes
    runtime = read_json(run_dir / "runtime.json")
    assert runtime["world_size"] == world
    per_node = world // nodes
    assert runtime["rank_hosts"] == [hosts[r // per_node] for r in range(world)]
    for rank in range(world):
        assert (run_dir / "logs" / f"rank{rank}.log").is_file()
    assert "epoch 1/1" in (run_dir / "logs" / "rank0.log").read_text()
    rows = (run_dir / "metrics.csv").read_text().splitlines()
    assert rows[0].startswith("epoch,") and len(rows) == 2
    return run


def test_submit_classifier_torchrun_mode_on_two_nodes(tmp_path: Path) -> None:
    """docs/launching.md's batch job, run as written (that page's lab test runs it only here):
    noderun submit --wait of the classifier on 2 nodes x 2 processes, then noderun verify."""
    result = run_snippet_of(  # exit 0 of both asserted
        "docs/launching.md",
        "tests/slurm/test_lab_jobs.py::test_submit_classifier_torchrun_mode_on_two_nodes",
        tmp_path,
    )
    run_dir = tmp_path / "runs" / "slurm"
    assert "verdict: HEALTHY" in result.stdout
    job_id = job_id_of(result.stdout)
    run = _check_classifier_run(run_dir, world=4, nodes=2)
    assert run["job_id"] == job_id and run["mode"] == "torchrun"
    # console: every rank line carries node:rank, progress only from rank 0, no merged lines
    rank_lines = [line for line in result.stdout.splitlines() if RANK_LINE.match(line)]
    assert any(line.startswith("0:0| epoch 1/1") for line in rank_lines)
    assert all(line.startswith("0:0| ") for line in rank_lines), rank_lines
    assert not [line for line in rank_lines if RANK_LINE.search(line.split("| ", 1)[1])]
    summary = (run_dir / "sacct_summary.txt").read_text()
    assert f"{job_id}.0" in summary and "COMPLETED" in summary
    assert (run_dir / "job.sbatch").read_text().startswith("#!/bin/bash\n")
    # the whole job's timeline, from `noderun submit` starting to the accounting it wrote
    stages = {row["stage"]: row for row in run["timeline"]}
    assert list(stages)[:3] == ["submit_started", "submitted", "job_running_seen"], list(stages)
    assert list(stages)[-2:] == ["job_end_seen", "accounting_written"], list(stages)
    assert stages["node_entered"]["count"] == 2 and stages["gate_passed"]["count"] == 2
    assert stages["rank_started"]["count"] == 4 and stages["process_group_up"]["count"] == 4
    assert stages["rank_exited"]["last"] <= stages["job_end_seen"]["first"]


def test_concurrent_jobs_on_shared_nodes_both_modes_hostile_args(tmp_path: Path) -> None:
    """Two 3-node jobs at once on the same nodes (ports from job ids), one per mode; a third
    on one node runs torchrun directly. The srun-mode job is a plain torch script."""
    pwned = tmp_path / "pwned"
    hostile = [arg.format(pwned=pwned) for arg in HOSTILE]
    jobs = {
        "torchrun3": ["--nodes", "3", "--nproc-per-node", "1", str(CLASSIFIER), "--epochs", "1"],
        "srun3": ["--mode", "srun", "--nodes", "3", "--nproc-per-node", "1",
                  str(WORKLOADS / "plain_contract.py"), *hostile],
        "single": ["--nodes", "1", "--nproc-per-node", "2",
                   str(WORKLOADS / "plain_contract.py"), "x y"],
    }  # fmt: skip
    ids = {}
    for name, args in jobs.items():
        result = noderun(
            ["submit", "--time", "5", "--run-dir", str(tmp_path / name), *args], cwd=ROOT
        )
        assert result.returncode == 0, result.stderr
        ids[name] = job_id_of(result.stdout)
    states = {name: wait(job_id) for name, job_id in ids.items()}
    assert {n: s.state for n, s in states.items()} == dict.fromkeys(jobs, "COMPLETED")

    a = _check_classifier_run(tmp_path / "torchrun3", world=3, nodes=3)
    b = read_json(tmp_path / "srun3" / "run.json")
    assert b["status"] == "completed" and b["mode"] == "srun"
    assert sorted(a["hosts"]) == sorted(b["hosts"]) == ["node1", "node2", "node3"]  # type: ignore[arg-type]
    assert a["start_time"] <= b["end_time"] and b["start_time"] <= a["end_time"], "no overlap"
    ports = {a["topology"]["master_port"], b["topology"]["master_port"]}  # type: ignore[index]
    assert len(ports) == 2

    for rank in range(3):
        (seen,) = contract_lines(tmp_path / "srun3", rank)
        assert seen["argv"] == hostile  # byte for byte, through sbatch, srun and the node
        assert (seen["rank"], seen["local_rank"], seen["world_size"]) == (rank, 0, 3)
        assert seen["sum"] == 6.0 and seen["host"] == b["hosts"][rank]  # type: ignore[index]
        assert seen["agent_store"] == "True"  # the plain script's env:// used noderun's store
    assert not pwned.exists()

    single = read_json(tmp_path / "single" / "run.json")
    assert single["status"] == "completed"
    assert (single["launch"], a["launch"], b["launch"]) == ("torchrun", "srun", "srun")
    assert [contract_lines(tmp_path / "single", r)[0]["local_rank"] for r in (0, 1)] == [0, 1]


def test_run_inside_salloc_both_modes(tmp_path: Path) -> None:
    """The classifier inside salloc: srun mode on 2 nodes x 2 and torchrun mode on 3 nodes."""
    srun = salloc(
        ["--nodes=2", "--ntasks-per-node=2", PYTHON, "-m", "noderun", "run", "--mode=srun",
         "--nproc-per-node=2", f"--run-dir={tmp_path / 'srun'}", str(CLASSIFIER), "--epochs", "1"]
    )  # fmt: skip
    torchrun = salloc(
        ["--nodes=3", PYTHON, "-m", "noderun", "run", "--nproc-per-node=1",
         f"--run-dir={tmp_path / 'torchrun'}", str(CLASSIFIER), "--epochs", "1"]
    )  # fmt: skip
    out_srun, _ = srun.communicate(timeout=300)
    out_torchrun, _ = torchrun.communicate(timeout=300)
    assert srun.returncode == 0, out_srun
    assert torchrun.returncode == 0, out_torchrun
    run = _check_classifier_run(tmp_path / "srun", world=4, nodes=2)
    assert run["mode"] == "srun"
    assert read_json(tmp_path / "srun" / "runtime.json")["topology"]["launcher"] == "env"
    run = _check_classifier_run(tmp_path / "torchrun", world=3, nodes=3)
    assert (run["mode"], run["launch"]) == ("torchrun", "srun")
    assert read_json(tmp_path / "torchrun" / "runtime.json")["topology"]["launcher"] == "torchrun"
    assert re.search(r"^0:0\| epoch 1/1", out_torchrun, re.MULTILINE), out_torchrun


def test_classifier_matrix_completes_in_the_remaining_modes_and_sizes(tmp_path: Path) -> None:
    """With the tests above, the classifier runs on 2 and 3 nodes in both modes, submitted and
    inside salloc: here submitted srun mode (2 x 2, 3 x 1) and salloc torchrun 2 x 2 and srun
    3 x 1, all at once (the lab queues what does not fit)."""
    classifier = [str(CLASSIFIER), "--epochs", "1"]
    submitted = {
        "submit-srun-2x2": ["--mode", "srun", "--nodes", "2", "--nproc-per-node", "2"],
        "submit-srun-3x1": ["--mode", "srun", "--nodes", "3", "--nproc-per-node", "1"],
    }
    ids = {}
    for name, args in submitted.items():
        result = noderun(
            ["submit", "--time", "5", "--run-dir", str(tmp_path / name), *args, *classifier],
            cwd=ROOT,
        )
        assert result.returncode == 0, result.stderr
        ids[name] = job_id_of(result.stdout)
    allocations = {
        "salloc-torchrun-2x2": (["--nodes=2", "--ntasks-per-node=2"], ["--nproc-per-node=2"]),
        "salloc-srun-3x1": (["--nodes=3"], ["--mode=srun", "--nproc-per-node=1"]),
    }
    noderun_run = [PYTHON, "-m", "noderun", "run"]
    started = {
        name: salloc([*alloc, *noderun_run, *run, f"--run-dir={tmp_path / name}", *classifier])
        for name, (alloc, run) in allocations.items()
    }
    for name, job_id in ids.items():
        assert wait(job_id).state == "COMPLETED", name
    for name, process in started.items():
        out, _ = process.communicate(timeout=420)
        assert process.returncode == 0, f"{name}: {out}"

    expected = {
        "submit-srun-2x2": ("srun", 4, 2),
        "submit-srun-3x1": ("srun", 3, 3),
        "salloc-torchrun-2x2": ("torchrun", 4, 2),
        "salloc-srun-3x1": ("srun", 3, 3),
    }
    for name, (mode, world, nodes) in expected.items():
        run = _check_classifier_run(tmp_path / name, world=world, nodes=nodes)
        assert run["mode"] == mode, name
        stages = {row["stage"]: row["count"] for row in run["timeline"]}
        entries = world if mode == "srun" else nodes  # srun mode: one node entry per rank
        assert (stages["node_entered"], stages["gate_passed"]) == (entries, entries), name
        # srun mode: rank 0 served torch's store on the gate's socket (torchrun: its agent did)
        assert stages.get("store_hosted") == (1 if mode == "srun" else None), name
        assert stages["rank_started"] == stages["rank_exited"] == world, name
        launcher = read_json(tmp_path / name / "runtime.json")["topology"]["launcher"]
        assert launcher == ("torchrun" if mode == "torchrun" else "env"), name
        assert cli(["verify", str(tmp_path / name)]).returncode == 0, name


def test_a_killed_rank_ends_the_job_fast_in_both_modes(tmp_path: Path) -> None:
    die = str(WORKLOADS / "die.py")
    in_salloc = salloc(
        ["--nodes=2", "--ntasks-per-node=2", PYTHON, "-m", "noderun", "run", "--mode=srun",
         "--nproc-per-node=2", f"--run-dir={tmp_path / 'srun'}", die, "--die-rank", "2"]
    )  # fmt: skip
    result = noderun(
        ["submit", "--wait", "--nodes", "2", "--nproc-per-node", "2", "--time", "5",
         "--run-dir", str(tmp_path / "torchrun"), die, "--die-rank", "3"],
        timeout=300,
        cwd=ROOT,
    )  # fmt: skip
    ended = time.time()
    assert result.returncode == 1, result.stdout + result.stderr
    killed = float((tmp_path / "torchrun" / "killed_at").read_text())
    assert ended - killed < 30, f"job took {ended - killed:.1f} s to end after the kill"
    assert "rank 3 (node 1 on node" in result.stderr and "killed by SIGKILL" in result.stderr
    run = read_json(tmp_path / "torchrun" / "run.json")
    assert run["status"] == "failed" and run["failure"]["rank"] == 3
    assert "FAILED" in (tmp_path / "torchrun" / "sacct_summary.txt").read_text()

    out, _ = in_salloc.communicate(timeout=300)
    ended = time.time()
    assert in_salloc.returncode != 0, out
    killed = float((tmp_path / "srun" / "killed_at").read_text())
    assert ended - killed < 30, out
    assert re.search(r"job failed: rank 2 on node\d: failed: Killed|job failed: rank 2 ", out), out


def test_ranks_that_never_arrive_end_fast_with_a_hint(tmp_path: Path) -> None:
    """A hand-written sbatch with the classic mistakes: python without srun, a node that never
    started, a wrong MASTER_ADDR, a port in use, the node entrypoint without srun."""
    node = [PYTHON, "-m", "noderun.node", "--nproc-per-node=2", "--join-timeout=5",
            f"--run-dir={tmp_path}"]  # fmt: skip
    busy = socket.socket()  # the lab's nodes share this machine's port space
    busy.bind(("", 0))
    busy.listen()
    busy_port = busy.getsockname()[1]
    plain = str(WORKLOADS / "plain_contract.py")
    cases = {
        "missing_srun": f"{PYTHON} {CLASSIFIER} --epochs 1",
        "dead_node": f"srun -N1 -n1 --label {' '.join(node)} --nnodes=2 -- {plain}",
        "wrong_master": f"srun -N2 -n2 --ntasks-per-node=1 --kill-on-bad-exit=1 --label "
        f"{' '.join(node)} --master-addr=127.0.10.99 -- {plain}",
        "port_in_use": f"srun -N2 -n2 --ntasks-per-node=1 --kill-on-bad-exit=1 --label "
        f"{' '.join(node)} --master-port={busy_port} -- {plain}",
        "node_without_srun": f"{' '.join(node)} -- {plain}",
    }
    lines = ["#!/bin/bash", "#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=2", "#SBATCH --time=5",
             f"#SBATCH --output={tmp_path}/slurm-%j.out", f"cd {ROOT}"]  # fmt: skip
    for name, command in cases.items():
        lines += [
            "start=$(date +%s.%N)",
            f"{command} > {tmp_path}/{name}.txt 2>&1 || echo exit=$? >> {tmp_path}/{name}.txt",
            f'echo "$start $(date +%s.%N)" > {tmp_path}/{name}.time',
        ]
    script = tmp_path / "mistakes.sbatch"
    script.write_text("\n".join(lines) + "\n")
    submitted = subprocess.run(
        ["sbatch", "--parsable", str(script)], capture_output=True, text=True, env=clean_env()
    )
    assert submitted.returncode == 0, submitted.stderr
    try:
        assert wait(submitted.stdout.strip()).final
    finally:
        busy.close()

    def outcome(name: str) -> tuple[str, float]:
        start, end = map(float, (tmp_path / f"{name}.time").read_text().split())
        return (tmp_path / f"{name}.txt").read_text(), end - start

    text, seconds = outcome("missing_srun")
    assert "python started without srun" in text and "srun python" in text, text
    assert "exit=" in text and seconds < 30
    text, seconds = outcome("dead_node")
    assert "1/2 nodes checked in" in text and "never arrived: node 1 (node" in text, text
    assert "ranks 2-3" in text and "exit=" in text and seconds < 30
    text, seconds = outcome("wrong_master")
    assert "MASTER_ADDR 127.0.10.99" in text and "not an address of node 0" in text, text
    assert seconds < 30
    text, seconds = outcome("port_in_use")
    assert f"MASTER_PORT {busy_port} is already in use on node" in text, text
    assert "--master-port" in text and seconds < 30
    text, _ = outcome("node_without_srun")
    assert "not running inside an srun step" in text and "srun --nodes=N" in text, text


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--nodes", "0", "SCRIPT"], ["--nodes", "at least 1"]),
        (["--nodes", "4", "SCRIPT"], ["--nodes 4", "3 node(s)"]),
        (["--nproc-per-node", "5", "SCRIPT"], ["5 CPUs per node", "at most 4"]),  # lab: 4 a node
        (["--partition", "nope", "SCRIPT"], ["partition 'nope' does not exist", "debug"]),
        (["--time", "1:2:3:4", "SCRIPT"], ["--time", "HH:MM:SS"]),
        (["--gpus-per-node", "1", "SCRIPT"], ["--gpus-per-node 1", "at most 0"]),
        (["missing_script.py"], ["missing_script.py", "not found"]),
        (["--mode", "mpi", "SCRIPT"], ["--mode"]),
    ],
    ids=["nodes-0", "too-many-nodes", "too-many-procs", "partition", "time", "gpus",
         "missing-script", "mode"],
)  # fmt: skip
def test_bad_submit_input_is_one_line_exit_2_nothing_submitted(
    args: list[str], words: list[str], tmp_path: Path
) -> None:
    name = f"bad-{tmp_path.name}"[:60]
    args = [str(WORKLOADS / "plain_contract.py") if a == "SCRIPT" else a for a in args]
    result = noderun(["submit", "--job-name", name, *args], cwd=tmp_path)
    _one_line_exit_2(result, words)
    assert not (tmp_path / "runs").exists()
    queue = subprocess.run(["squeue", "-h", "-n", name], capture_output=True, text=True)
    assert queue.stdout.strip() == ""


def test_submit_without_sbatch_is_one_line_exit_2(tmp_path: Path) -> None:
    result = subprocess.run(
        [PYTHON, "-m", "noderun", "submit", str(WORKLOADS / "plain_contract.py")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=clean_env(PATH=str(tmp_path)),
    )
    _one_line_exit_2(result, ["`sbatch` not found", "login node", "--dry-run"])
    assert not (tmp_path / "runs").exists()


def _one_line_exit_2(result: subprocess.CompletedProcess[str], words: list[str]) -> None:
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "hint:" in lines[0]
    for word in words:
        assert word in lines[0], lines[0]
    assert result.stdout == ""


def test_job_state_reads_a_finished_job() -> None:
    probe = subprocess.run(
        ["sbatch", "--parsable", "--wrap", "exit 3", "--output=/dev/null"],
        capture_output=True,
        text=True,
        env=clean_env(),
    )
    assert probe.returncode == 0, probe.stderr
    final = wait(probe.stdout.strip())
    assert (final.status, final.shell_exit_code) == ("failed", 3)
    assert job_state(probe.stdout.strip()) is not None


@pytest.mark.parametrize("mode", ["torchrun", "srun"])
def test_a_plain_scripts_killed_rank_is_named_not_its_peer(tmp_path: Path, mode: str) -> None:
    """No noderun import: rank 3 SIGKILLs itself, its peers die of "Connection closed by peer"
    in the same second. The launcher's last line, run.json and explain name rank 3."""
    from tests.conftest import SCRIPTS

    run_dir = tmp_path / "run"
    result = noderun(
        ["submit", "--wait", "--mode", mode, "--nodes", "2", "--nproc-per-node", "2",
         "--time", "5", "--env", "PLAIN_MODE=sigkill:3", "--run-dir", str(run_dir),
         str(SCRIPTS / "plain_gang.py")],
        timeout=300,
        cwd=ROOT,
    )  # fmt: skip
    assert result.returncode == 1, result.stdout[-2000:] + result.stderr[-2000:]
    last = result.stderr.strip().splitlines()[-1]
    assert "rank 3 (node 1 on node" in last and "killed by SIGKILL" in last, last
    assert read_json(run_dir / "run.json")["failure"]["rank"] == 3
    explained = cli(["explain", str(run_dir)])
    assert explained.returncode == 1
    assert "  failed:   rank 3 (node 1 on node" in explained.stdout, explained.stdout
