"""`noderun doctor` for real: on this machine, and submitted to the Slurm lab."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import clean_env, cli, noderun
from tests.slurm.lab import require_lab

SECRET = "s3cr3t-value-never-printed"


def assert_report(report: dict, nodes: list[str], world: int) -> None:
    assert report["nodes"] == nodes
    by_node = {(c["node"], c["check"]): c for c in report["checks"]}
    for node in nodes:
        for name in ("versions", "master-resolve", "master-reachable", "shared-fs", "clock-skew"):
            assert by_node[(node, name)]["status"] == "PASS", by_node[(node, name)]
    assert by_node[(nodes[0], "port-free")]["status"] == "PASS"
    assert by_node[("all", "collective")]["status"] in ("PASS", "WARN")
    sizes = report["collective"]["all_reduce"]
    assert [s["size_bytes"] for s in sizes] == [1 << 10, 1 << 16, 1 << 20, 1 << 24]
    factor = 2 * (world - 1) / world
    for size in sizes:
        assert size["algbw_gbps"] == pytest.approx(size["size_bytes"] / size["time_us"] / 1e3)
        assert size["busbw_gbps"] == pytest.approx(size["algbw_gbps"] * factor)


@pytest.mark.slow
def test_doctor_on_this_machine(tmp_path: Path):
    done = noderun(
        ["doctor", "--json", "--run-dir", str(tmp_path / "doc")], timeout=300, HF_TOKEN=SECRET
    )
    assert done.returncode in (0, 1), done.stderr
    report = json.loads(done.stdout)
    assert report["mode"] == "local" and report["collective"]["world_size"] == 2
    assert_report(report, report["nodes"], 2)
    assert report["healthy"] is (done.returncode == 0)
    # the collective ran as a launch: the backends' per-rank log, under its own folder
    assert "NODERUN_DOCTOR_COLLECTIVE" in (tmp_path / "doc/collective/logs/rank0.log").read_text()
    logs = b"".join(p.read_bytes() for p in (tmp_path / "doc" / "logs").iterdir())
    assert SECRET not in done.stdout + done.stderr and SECRET.encode() not in logs


@pytest.mark.slurm
@pytest.mark.slow
def test_doctor_submits_itself_to_the_lab(tmp_path: Path):
    require_lab()
    run_dir = tmp_path / "doc"
    done = noderun(
        ["doctor", "--submit", "--nodes", "3", "--json", "--run-dir", str(run_dir)],
        timeout=300,
        HF_TOKEN=SECRET,
    )
    assert done.returncode in (0, 1), done.stderr
    report = json.loads(done.stdout)
    assert report["mode"].startswith("slurm job ")
    assert_report(report, ["node1", "node2", "node3"], 3)
    pairs = report["collective"]["pairs"]  # one link round measures all three pairs
    expected = [["node1", "node2"], ["node1", "node3"], ["node2", "node3"]]
    assert [p["nodes"] for p in pairs] == expected
    assert all(p["bandwidth_bytes_per_sec"] > 0 for p in pairs)
    assert set(report["collective"]["seconds"]) == {"init", "all_reduce", "links"}
    assert (run_dir / "doctor.sbatch").is_file()
    logs = b"".join(p.read_bytes() for p in (run_dir / "logs").iterdir())  # progress: binary
    assert SECRET not in done.stdout + done.stderr and SECRET.encode() not in logs


@pytest.mark.slurm
def test_submit_with_more_nodes_than_the_partition_is_refused(tmp_path: Path):
    require_lab()
    done = cli(["doctor", "--submit", "--nodes", "64", "--run-dir", str(tmp_path / "d")])
    assert done.returncode == 2
    assert "--nodes 64 but partition" in done.stderr and len(done.stderr.splitlines()) == 1
    assert not (tmp_path / "d" / "doctor.sbatch").exists()  # nothing submitted


@pytest.mark.slurm
@pytest.mark.slow
def test_a_port_held_on_the_master_fails_the_doctor(tmp_path: Path):
    """A real stale listener on the job's port: the doctor fails and names port and fix."""
    require_lab()
    script = Path(__file__).parent / "scripts" / "hold_port_then_doctor.py"
    done = subprocess.run(
        ["salloc", "--nodes=2", "--time=00:05:00", sys.executable, str(script),
         "--run-dir", str(tmp_path / "doc")],
        capture_output=True, text=True, timeout=300, env=clean_env(),
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    # the allocation's nodes, whichever two the shared lab gave: the first is the master
    master, other = sorted(
        {c["node"] for c in report["checks"] if str(c.get("node")).startswith("node")}
    )
    port = {(c["node"], c["check"]): c for c in report["checks"]}[(master, "port-free")]
    assert port["status"] == "FAIL" and "in use on the master" in port["detail"]
    assert "another --master-port" in port["fix"]
    # the other node is told what holds the port at once (it used to retry ~20 s, then say
    # "cannot connect to the master")
    reach = {(c["node"], c["check"]): c for c in report["checks"]}[(other, "master-reachable")]
    assert reach["status"] == "FAIL" and "another program holds it" in reach["detail"], reach
