"""Drop-in on the real Slurm lab: the user's OWN batch script, with `torchrun` swapped for
`noderun run` — under srun (`srun noderun run`) and without it — running scripts written like
third-party ones (tests/slurm/workloads/users). One job holds every step, in the order a user
would try them, to keep the lab time short; a second, plain job (no noderun at all) is then
verified by job id."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.backends.test_rank_environment import DUMP, _seen, torchrun_gives
from tests.conftest import ROOT, SCRIPTS, clean_env, cli, noderun
from tests.slurm.lab import WORKLOADS, job_id_of, read_json, require_lab, wait

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
__all__ = ["torchrun_gives"]  # the fixture, shared

USERS = WORKLOADS / "users"
PLAIN = SCRIPTS / "plain_torch.py"  # no DDP, no noderun: one all_reduce
NODERUN = Path(sys.executable).parent / "noderun"
STEP_RC = re.compile(r"^STEP (\S+) rc=(\d+)$", re.MULTILINE)


@pytest.fixture(autouse=True)
def _lab() -> None:
    require_lab()


@pytest.fixture
def lab_dir(request: pytest.FixtureRequest) -> Iterator[Path]:
    """A directory of our own: pytest's rotating tmp_path (kept for its 3 newest sessions) is
    removed under a job minutes long when other sessions run pytest on this machine. Kept
    when the test failed, to look at."""
    path = Path(tempfile.mkdtemp(prefix="noderun-dropin-", dir="/tmp"))
    failed_before = request.session.testsfailed
    yield path
    if request.session.testsfailed == failed_before:
        shutil.rmtree(path, ignore_errors=True)


def _sbatch(tmp_path: Path, body: str, nodes: int = 2) -> tuple[str, str]:
    """Submit the user's script; wait for the job; (job id, its output)."""
    out = tmp_path / "job.out"
    script = tmp_path / "user.sbatch"
    script.write_text(
        f"#!/bin/bash\n#SBATCH --nodes={nodes} --ntasks-per-node=1 --cpus-per-task=2 --time=10\n"
        f"#SBATCH --output={out}\ncd {tmp_path}\nNR={NODERUN}\nW={USERS}\nDUMP={DUMP}\n"
        f"PLAIN={PLAIN}\n"
        f"PORT=$((20000 + SLURM_JOB_ID % 20000))\n{body}"
    )
    done = subprocess.run(
        ["sbatch", "--parsable", str(script)], capture_output=True, text=True, env=clean_env()
    )
    assert done.returncode == 0, done.stderr
    job_id = done.stdout.strip().split(";")[0]
    wait(job_id)
    return job_id, out.read_text()


def _world_lines(run_dir: Path, world: int, start: str = "world ") -> list[str]:
    """What the multinode trainer printed after init, from every rank's own log."""
    lines = []
    for rank in range(world):
        text = (run_dir / "logs" / f"rank{rank}.log").read_text()
        lines += [ln for ln in text.splitlines() if ln.startswith(start)]
    return sorted(lines)


def _plain_lines(run_dir: Path, world: int) -> list[str]:
    """What tests/scripts/plain_torch.py printed after its all_reduce, from every rank's log:
    the steps whose point is the launch alone run it (no DDP: ~1.2 CPU-s less a rank)."""
    return _world_lines(run_dir, world, start="plain rank=")


@pytest.mark.timeout(900)  # sixteen steps, and the shared lab's queue before them
def test_users_batch_script_with_srun_noderun_run(
    lab_dir: Path, torchrun_gives: dict[int, dict[str, Any]]
) -> None:
    tmp_path = lab_dir
    body = """\
srun -n 4 --ntasks-per-node=2 --cpus-per-task=1 $NR run --nproc-per-node 2 --run-dir bad-agents \\
    $W/multinode_snapshot.py 1; echo "STEP bad-agents rc=$?"
srun bash -c 'exec "$0" run --nproc-per-node $((SLURM_NODEID+1)) --run-dir bad-nproc \\
    "$1"/multinode_snapshot.py 1' $NR $W; echo "STEP bad-nproc rc=$?"
nodes=( $(scontrol show hostnames "$SLURM_JOB_NODELIST") )
for n in node1 node2 node3; do [[ " ${nodes[*]} " == *" $n "* ]] || outside=$n; done
echo "NODES head=${nodes[0]} outside=$outside"
srun $NR run --nproc-per-node 2 --rdzv_endpoint $outside:$PORT --run-dir bad-endpoint \\
    $W/multinode_snapshot.py 1; echo "STEP bad-endpoint rc=$?"
head_node_ip=$(getent hosts ${nodes[0]} | awk '{print $1; exit}')  # node 0's address
srun $NR run --nproc-per-node 2 --rdzv_id $RANDOM --rdzv_backend c10d \\
    --rdzv_endpoint $head_node_ip:$PORT --run-dir in-step $W/multinode_snapshot.py 2 \\
    --snapshot snap1.pt; echo "STEP in-step rc=$?"
srun bash -c 'exec "$0" run --nnodes 2 --nproc-per-node 2 --node-rank $SLURM_NODEID \\
    --master-addr "$2" --master-port "$3" --run-dir static "$1"' $NR $PLAIN ${nodes[0]} \\
    $((PORT + 1)); echo "STEP static rc=$?"
$NR run --nproc-per-node 2 --run-dir batch $W/multinode_snapshot.py 2 --snapshot snap2.pt
echo "STEP batch rc=$?"
srun $NR run --nproc-per-node 2 --run-dir fail $W/multinode_snapshot.py 2 --snapshot snap3.pt \\
    --fail-rank 3; echo "STEP fail rc=$?"
mkdir env-out; env -u OMP_NUM_THREADS DUMP_OUT=$PWD/env-out srun $NR run --nproc-per-node 2 \\
    --env K=in-step --run-dir env-step $DUMP; echo "STEP env-step rc=$?"
srun $NR run --run-dir fsdp $W/fsdp2_dcp.py --ckpt dcp; echo "STEP fsdp rc=$?"
srun $NR run --run-dir fabric-alone $W/fabric_lt.py; echo "STEP fabric-alone rc=$?"
srun $NR run --env LT_ACCELERATOR=cpu --env LT_DEVICES=1 --env LT_NUM_NODES=2 --run-dir fabric \\
    $W/fabric_lt.py; echo "STEP fabric rc=$?"
srun $NR run --run-dir lightning $W/lightning_no_num_nodes.py 1; echo "STEP lightning rc=$?"
srun $NR run --run-dir accelerate-alone $W/accelerate_style.py; echo "STEP accelerate-alone rc=$?"
srun -n 4 --ntasks-per-node=2 --cpus-per-task=1 $NR run --mode srun --run-dir srun-mode \\
    $PLAIN; echo "STEP srun-mode rc=$?"
srun -n 4 --ntasks-per-node=2 --cpus-per-task=1 $NR run --mode srun --run-dir srun-mode-fail \\
    $W/multinode_snapshot.py 2 --snapshot snap5.pt --fail-rank 2; echo "STEP srun-mode-fail rc=$?"
LT_ACCELERATOR=cpu LT_DEVICES=1 LT_NUM_NODES=2 $NR run --run-dir fabric-batch $W/fabric_lt.py
echo "STEP fabric-batch rc=$?"
"""
    job_id, output = _sbatch(tmp_path, body)
    rc = dict(STEP_RC.findall(output))
    assert len(rc) == 16, output

    # two agents per node: every task says so in one line, exit 2, nothing started
    assert rc["bad-agents"] == "2", output
    refusals = [ln for ln in output.splitlines() if "torchrun agents per node" in ln]
    assert len(refusals) == 4, output  # 2 nodes x 2 tasks
    tasks = {m.group(1) for ln in refusals if (m := re.search(r"\[task (\d)", ln))}
    assert tasks == {"0", "1", "2", "3"}, refusals
    assert not (tmp_path / "bad-agents").exists()
    # another --nproc-per-node on node 1: both nodes refuse at the check-in, exit 2, no rank ran
    assert rc["bad-nproc"] == "2", output
    mismatch = [ln for ln in output.splitlines() if "was started with `--nproc-per-node=2" in ln]
    assert sorted(ln.split("|")[0] for ln in mismatch) == ["0:-", "1:-"], output
    logs = tmp_path / "bad-nproc" / "logs"
    assert not list(logs.glob("rank*.group.json"))  # no rank ever started
    assert all(not p.read_text() for p in logs.glob("rank*.log"))

    # an endpoint on a lab node outside the job: every task says so, nothing started
    assert rc["bad-endpoint"] == "2", output
    found = re.search(r"^NODES head=(node(\d)) outside=(node\d)$", output, re.MULTILINE)
    assert found, output
    head, number, elsewhere = found.groups()
    refused = [ln for ln in output.splitlines() if f"--rdzv-endpoint {elsewhere}:" in ln]
    assert len(refused) == 2, output
    assert all(f"is not node 0 ({head}: 127.0.10.{number})" in ln for ln in refused), refused
    tasks = {m.group(1) for ln in refused if (m := re.search(r"\[task (\d)", ln))}
    assert tasks == {"0", "1"}, refused
    assert not (tmp_path / "bad-endpoint").exists()

    # srun noderun run (node 0 by address, as pytorch/examples' sbatch gives it) and noderun
    # run in the batch script: the same job
    in_step, batch = (
        read_json(tmp_path / "in-step/run.json"),
        read_json(tmp_path / "batch/run.json"),
    )
    assert rc["in-step"] == rc["batch"] == "0", output
    for run in (in_step, batch):
        assert run["status"] == "completed" and run["backend"] == "slurm", run
        assert run["job_id"] == job_id and len(set(run["hosts"])) == 2, run
    assert in_step["hosts"] == batch["hosts"] and in_step["mode"] == batch["mode"] == "torchrun"
    assert in_step["topology"]["world_size"] == batch["topology"]["world_size"] == 4
    assert in_step["topology"]["master_port"] == 20000 + int(job_id) % 20000  # the endpoint's
    for name in ("in-step", "batch"):
        assert _world_lines(tmp_path / name, 4) == [f"world 4 rank {r}" for r in range(4)]
        verdict = cli(["verify", str(tmp_path / name)])
        assert verdict.returncode == 0, verdict.stdout
        assert re.search(r"one-group\s+PASS\s+the ranks formed a group of 4", verdict.stdout)
    assert (tmp_path / "snap1.pt").is_file() and (tmp_path / "snap2.pt").is_file()
    # torchrun's static form under srun (--node-rank $SLURM_NODEID --master-addr NODE0): the
    # same one job, on the port given
    static = read_json(tmp_path / "static/run.json")
    assert rc["static"] == "0" and static["status"] == "completed", output
    assert static["hosts"] == in_step["hosts"] and static["launch"] == "srun noderun run"
    assert static["topology"]["master_port"] == 20001 + int(job_id) % 20000
    assert _plain_lines(tmp_path / "static", 4) == [
        f"plain rank={r} local_rank={r % 2} world=4 sum=6" for r in range(4)
    ]  # the node rank given by hand places the ranks; one all_reduce over the 4

    # every rank of srun noderun run sees what torchrun gives its workers, and --env
    assert rc["env-step"] == "0", output
    for rank, env in _seen(tmp_path / "env-out", 4).items():
        assert not sorted(set(torchrun_gives[0]) - set(env)), rank
        assert (env["K"], env["OMP_NUM_THREADS"], env["LOCAL_WORLD_SIZE"]) == ("in-step", "1", "2")
        assert env["GROUP_RANK"] == str(rank // 2) and env["WORLD_SIZE"] == "4", rank

    # a rank that raises: named by the one run.json, verify says so
    fail = read_json(tmp_path / "fail/run.json")
    assert rc["fail"] != "0" and fail["status"] == "failed", fail
    assert fail["failure"]["rank"] == 3, fail["failure"]
    assert "rank 3 hit a bad batch" in fail["failure"]["reason"]
    assert cli(["verify", str(tmp_path / "fail")]).returncode == 1

    # FSDP2 + DCP across both nodes
    assert rc["fsdp"] == "0", output
    assert "fsdp2 world 2 saved" in (tmp_path / "fsdp/logs/rank0.log").read_text()
    assert (tmp_path / "dcp" / ".metadata").is_file()

    # Fabric without LT_*: two trainings alone, and the last line says so with Fabric's fix
    assert rc["fabric-alone"] == "0", output
    assert "NOT distributed: 2 ranks ran as 2 independent" in output
    assert "Fabric(num_nodes=2, devices=1)" in output
    alone = cli(["verify", str(tmp_path / "fabric-alone")])
    assert alone.returncode == 1, alone.stdout
    assert re.search(r"one-group\s+FAIL\s+2 ranks ran as 2 independent", alone.stdout)
    # with LT_* (--env: every rank of every node): one world of 2
    assert rc["fabric"] == "0", output
    fabric_logs = (tmp_path / "fabric/logs/rank1.log").read_text()
    assert "fabric world 2 rank 1" in fabric_logs
    assert cli(["verify", str(tmp_path / "fabric")]).returncode == 0

    # Lightning with one device and no num_nodes under a world of 2: it runs alone on each
    # node (no error from Lightning); the last line says so with Lightning's fix
    lightning = read_json(tmp_path / "lightning/run.json")
    assert rc["lightning"] == "0" and lightning["status"] == "completed", output
    assert "Trainer(num_nodes=2, devices=1)" in output
    assert cli(["verify", str(tmp_path / "lightning")]).returncode == 1

    # accelerate on CPU under srun noderun run: alone without ACCELERATE_USE_CPU, and told so.
    # With it, `ACCELERATE_USE_CPU=1 noderun run` in the batch script gives one world of 2:
    # test_users_scripts_submitted_in_both_modes' accelerate-torchrun job is exactly that
    # (noderun submit writes `export ACCELERATE_USE_CPU=1` and `noderun run` into its batch
    # script), with this step's assertions there
    assert rc["accelerate-alone"] == "0", output
    assert "ACCELERATE_USE_CPU=1" in output.split("STEP lightning rc=")[1], output
    assert cli(["verify", str(tmp_path / "accelerate-alone")]).returncode == 1

    # srun with two tasks a node and --mode srun: each task one rank of one job of 4
    srun_mode, srun_fail = (
        read_json(tmp_path / n / "run.json") for n in ("srun-mode", "srun-mode-fail")
    )
    assert rc["srun-mode"] == "0" and srun_mode["status"] == "completed", output
    for run in (srun_mode, srun_fail):
        assert run["mode"] == "srun" and run["job_id"] == job_id, run
        assert run["topology"]["world_size"] == 4 and len(set(run["hosts"])) == 2, run
    assert _plain_lines(tmp_path / "srun-mode", 4) == [
        f"plain rank={r} local_rank={r % 2} world=4 sum=6" for r in range(4)
    ]
    assert _world_lines(tmp_path / "srun-mode-fail", 4) == [f"world 4 rank {r}" for r in range(4)]
    verdict = cli(["verify", str(tmp_path / "srun-mode")])
    assert verdict.returncode == 0, verdict.stdout
    assert re.search(r"one-group\s+PASS\s+the ranks formed a group of 4", verdict.stdout)
    assert rc["srun-mode-fail"] != "0" and srun_fail["status"] == "failed", output
    assert srun_fail["failure"]["rank"] == 2, srun_fail["failure"]
    assert cli(["verify", str(tmp_path / "srun-mode-fail")]).returncode == 1

    # noderun run in the batch script (no srun) of Fabric with LT_* from the script's own
    # environment. FSDP2 and Lightning run that way in test_users_scripts_submitted_in_both_modes
    # (noderun submit's torchrun-mode job is `noderun run` in its batch script): fsdp-torchrun,
    # lightning-torchrun, with these same assertions there
    assert rc["fabric-batch"] == "0", output
    assert "fabric world 2 rank 1" in (tmp_path / "fabric-batch/logs/rank1.log").read_text()
    assert cli(["verify", str(tmp_path / "fabric-batch")]).returncode == 0
    assert output.count("Trainer(num_nodes=2, devices=1)") == 1  # the srun noderun run step's


@pytest.mark.timeout(600)  # the shared lab's queue
def test_plain_sbatch_job_is_verified_from_what_slurm_knows(lab_dir: Path) -> None:
    """No noderun in the job at all: verify JOBID and explain JOBID read SLURM's record and the
    job's own output file; a rank that raised fails the job and is named."""
    body = (
        """\
export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -1)
export MASTER_PORT=$((20000 + SLURM_JOB_ID % 20000))
srun bash -c 'RANK=$SLURM_PROCID LOCAL_RANK=$SLURM_LOCALID WORLD_SIZE=$SLURM_NTASKS \\
    exec "$0" "$1"/multinode_snapshot.py 2 --snapshot snap.pt --fail-rank 1' \\
    """
        + sys.executable
        + """ $W
"""
    )
    job_id, output = _sbatch(lab_dir, body)
    assert "rank 1 hit a bad batch" in output
    verdict = cli(["verify", job_id], cwd=ROOT)
    assert verdict.returncode == 1, verdict.stdout + verdict.stderr
    assert "judged_from=SLURM (no noderun run directory)" in verdict.stdout, verdict.stdout
    assert f"run `noderun explain {job_id}`" in verdict.stdout
    assert re.search(r"job-state\s+FAIL\s+job \d+ ended FAILED", verdict.stdout), verdict.stdout
    # srun ends the step FAILED, or CANCELLED when it kills the other task first (exit 0:6 seen)
    assert re.search(r"steps\s+FAIL\s+step \d+\.0 (FAILED|CANCELLED)", verdict.stdout), (
        verdict.stdout
    )
    assert re.search(r"rank-logs\s+FAIL.*rank 1 hit a bad batch", verdict.stdout), verdict.stdout
    explained = cli(["explain", job_id], cwd=ROOT)
    assert "rank 1 hit a bad batch" in explained.stdout, explained.stdout


def _verify(run_dir: Path) -> subprocess.CompletedProcess[str]:
    return cli(["verify", str(run_dir)])


def _job_output(run_dir: Path, job_id: str) -> str:
    return (run_dir / "logs" / f"slurm-{job_id}.out").read_text()


@pytest.mark.timeout(900)  # nine small jobs, three at a time, and the shared lab's queue
def test_users_scripts_submitted_in_both_modes(lab_dir: Path) -> None:
    """`noderun submit` of every user-style script, torchrun mode and --mode srun, 2 nodes x 1
    rank each (three such jobs fit the lab at once): the world, verify's verdict, and for a
    failure the rank that raised — rank 1 in torchrun mode, rank 0 (the store's host) in srun
    mode."""
    srun = ["--mode", "srun"]
    lt = ["--env", "LT_ACCELERATOR=cpu", "--env", "LT_DEVICES=1", "--env", "LT_NUM_NODES=2"]
    jobs = {
        "snapshot-torchrun-fail": [str(USERS / "multinode_snapshot.py"), "2", "--snapshot",
                                   str(lab_dir / "s1.pt"), "--fail-rank", "1"],
        "snapshot-srun-fail": [*srun, str(USERS / "multinode_snapshot.py"), "2", "--snapshot",
                               str(lab_dir / "s2.pt"), "--fail-rank", "0"],
        "snapshot-srun": [*srun, str(USERS / "multinode_snapshot.py"), "2", "--snapshot",
                          str(lab_dir / "s3.pt")],
        "fsdp-srun": [*srun, str(USERS / "fsdp2_dcp.py"), "--ckpt", str(lab_dir / "dcp")],
        "fsdp-torchrun": [str(USERS / "fsdp2_dcp.py"), "--ckpt", str(lab_dir / "dcp2")],
        "accelerate-torchrun": ["--env", "ACCELERATE_USE_CPU=1",
                                str(USERS / "accelerate_style.py")],
        "accelerate-srun-alone": [*srun, str(USERS / "accelerate_style.py")],
        "fabric-srun": [*srun, *lt, str(USERS / "fabric_lt.py")],
        "fabric-torchrun-alone": [str(USERS / "fabric_lt.py")],
        "lightning-torchrun": [str(USERS / "lightning_no_num_nodes.py"), "1"],
        "lightning-srun": [*srun, str(USERS / "lightning_no_num_nodes.py"), "1"],
    }  # fmt: skip
    ids = {}
    for name, args in jobs.items():
        submitted = noderun(
            ["submit", "--nodes", "2", "--time", "5", "--run-dir", str(lab_dir / name), *args],
            cwd=lab_dir,
        )
        assert submitted.returncode == 0, submitted.stdout + submitted.stderr
        ids[name] = job_id_of(submitted.stdout)
    states = {name: wait(job_id).state for name, job_id in ids.items()}
    runs = {name: read_json(lab_dir / name / "run.json") for name in jobs}
    out = {name: _job_output(lab_dir / name, ids[name]) for name in jobs}
    for name, run in runs.items():
        assert run["topology"]["world_size"] == 2 and len(set(run["hosts"])) == 2, (name, run)
        assert run["mode"] == ("srun" if "srun" in name else "torchrun"), (name, run["mode"])
    failed = {n for n in jobs if n.endswith("-fail")}
    assert {n: s for n, s in states.items() if n not in failed} == dict.fromkeys(
        set(jobs) - failed, "COMPLETED"
    ), out
    # run.json agrees (lightning-torchrun: Lightning alone on each node still completes)
    assert {n: r["status"] for n, r in runs.items() if n not in failed} == dict.fromkeys(
        set(jobs) - failed, "completed"
    )

    # a rank that raised, in each mode: run.json and verify name it
    for name, rank in (("snapshot-torchrun-fail", 1), ("snapshot-srun-fail", 0)):
        assert states[name] == "FAILED" and runs[name]["status"] == "failed", out[name]
        assert runs[name]["failure"]["rank"] == rank, (name, runs[name]["failure"])
        assert f"rank {rank} hit a bad batch" in runs[name]["failure"]["reason"], name
        assert _world_lines(lab_dir / name, 2) == ["world 2 rank 0", "world 2 rank 1"], name
        verdict = _verify(lab_dir / name)
        assert verdict.returncode == 1 and f"rank {rank}" in verdict.stdout, verdict.stdout

    # one world of 2, and verify says HEALTHY with the group it formed
    said = {
        "snapshot-srun": ("logs/rank1.log", "world 2 rank 1"),
        "fsdp-srun": ("logs/rank0.log", "fsdp2 world 2 saved"),
        "fsdp-torchrun": ("logs/rank0.log", "fsdp2 world 2 saved"),
        "accelerate-torchrun": ("logs/rank1.log", "accelerate processes 2 index 1"),
        "fabric-srun": ("logs/rank1.log", "fabric world 2 rank 1"),
    }
    for name, (log, words) in said.items():
        assert words in (lab_dir / name / log).read_text(), (name, out[name])
        verdict = _verify(lab_dir / name)
        assert verdict.returncode == 0, (name, verdict.stdout)
        assert re.search(r"one-group\s+PASS\s+the ranks formed a group of 2", verdict.stdout)
    for rank in (0, 1):  # every rank of accelerate-torchrun (the drop-in job's accelerate step)
        log = lab_dir / "accelerate-torchrun" / "logs" / f"rank{rank}.log"
        assert f"accelerate processes 2 index {rank}" in log.read_text(), out["accelerate-torchrun"]
    assert (lab_dir / "dcp" / ".metadata").is_file() and (lab_dir / "dcp2" / ".metadata").is_file()
    assert (lab_dir / "s3.pt").is_file()

    # never one group: the job's last line and verify say so, with the framework's fix
    fixes = {
        "accelerate-srun-alone": "ACCELERATE_USE_CPU=1",
        "fabric-torchrun-alone": "Fabric(num_nodes=2, devices=1)",
        "lightning-torchrun": "Trainer(num_nodes=2, devices=1)",
        # srun mode: Lightning takes SLURM's environment (auto-requeue) and still runs alone
        "lightning-srun": "Trainer(num_nodes=2, devices=1)",
    }
    for name, fix in fixes.items():
        last = out[name].strip().splitlines()[-1]
        assert "NOT distributed" in last and fix in last, (name, out[name][-3000:])
        verdict = _verify(lab_dir / name)
        assert verdict.returncode == 1, (name, verdict.stdout)
        assert re.search(r"one-group\s+FAIL", verdict.stdout), (name, verdict.stdout)
