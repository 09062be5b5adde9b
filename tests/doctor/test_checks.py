"""Doctor checks on probe facts: each failure is named with its fix; secrets never leave."""

from __future__ import annotations

import hashlib
import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from noderun.check_result import Status
from noderun.doctor import checks, fingerprint
from noderun.doctor.collective import bus_factor
from noderun.doctor.probe import visible_env
from noderun.doctor.runner import Checklist, batch_plan
from noderun.errors import UsageError
from noderun.srun_lines import read_marked, write_marked


def facts(host: str = "node1", **over: object) -> dict:
    base = {
        "host": host,
        "is_master": host == "node1",
        "python": "3.11.7",
        "torch": "2.13.0",
        "cuda": None,
        "nccl": None,
        "device_count": 0,
        "tasks_per_node": "1",
        "cuda_visible_devices": None,
        "env": {},
        "master": {"host": "node1", "addresses": ["10.0.0.1"], "reverse": "node1", "error": None},
        "port": {"port": 20001, "free": True, "error": None} if host == "node1" else None,
        "contact": {"reachable": True, "clock_offset_sec": 0.001, "round_trip_ms": 0.3},
        "route": {"interface": "eth0", "local_address": "10.0.0.2", "error": None},
        "shared_fs": {"path": "/shared/run/.doctor-token", "ok": True},
        "disk_free_bytes": 50 << 30,
        "leftovers": {"processes": [], "shm": [], "torchelastic_dirs": []},
    }
    base.update(over)
    return base


def statuses(probes: list[dict], hosts=("node1", "node2")) -> dict[tuple[str, str], Check]:
    return {(c.node, c.check.name): c.check for c in checks.node_checks(probes, list(hosts))}


Check = checks.Check


def test_a_healthy_cluster_passes():
    found = statuses([facts("node1"), facts("node2")])
    assert {c.status for c in found.values()} == {Status.PASS, Status.SKIP}
    assert found[("node2", "port-free")].status is Status.SKIP
    assert "NCCL_SOCKET_IFNAME=eth0" in found[("node1", "interface")].detail


@pytest.mark.parametrize(
    ("node2", "check", "words", "fix"),
    [
        ({"torch": "2.12.1"}, "versions", "torch 2.12.1", "same"),
        ({"device_count": 1, "tasks_per_node": "4"}, "devices", "4 tasks per node", "one rank"),
        (
            {"master": {"host": "node1", "addresses": [], "error": "gaierror: -2"}},
            "master-resolve", "does not resolve", "hostname",
        ),
        (
            {"contact": {"reachable": False, "error": "ConnectionRefusedError"}},
            "master-reachable", "ConnectionRefusedError", "firewall",
        ),
        (
            {"contact": {"reachable": False, "foreign": True,
                         "error": "port 29500 accepted … another program holds it"}},
            "master-reachable", "another program holds it", "another --master-port",
        ),
        (
            {"route": {"interface": "docker0", "local_address": "172.17.0.2"}},
            "interface", "via docker0", "NCCL_SOCKET_IFNAME",
        ),
        (
            {"env": {"NCCL_SOCKET_IFNAME": "ib0"}},
            "interface", "NCCL_SOCKET_IFNAME=ib0", "export NCCL_SOCKET_IFNAME=eth0",
        ),
        (
            {"shared_fs": {"path": "/scratch/.doctor-token", "ok": False, "error": "No such file"}},
            "shared-fs", "not read at /scratch/.doctor-token", "mounts",
        ),
        ({"disk_free_bytes": 10 << 20}, "disk", "0.0 GiB free", "free space"),
        (
            {"contact": {"reachable": True, "clock_offset_sec": 42.0, "round_trip_ms": 1.0}},
            "clock-skew", "+42000.0 ms", "chrony",
        ),
    ],
    ids=[
        "version", "devices", "resolve", "unreachable", "foreign", "docker0", "wrong-ifname",
        "shared-fs", "disk", "clock",
    ],
)  # fmt: skip
def test_each_failure_names_the_node_and_the_fix(node2, check, words, fix):
    found = statuses([facts("node1"), facts("node2", **node2)])
    result = found[("node2", check)]
    assert result.status is Status.FAIL, result
    assert words in result.detail and fix in result.fix
    assert not checks.healthy(checks.node_checks([facts("node1"), facts("node2", **node2)],
                                                 ["node1", "node2"]))  # fmt: skip


def test_port_in_use_on_the_master():
    master = facts("node1", port={"port": 20001, "free": False, "error": "[Errno 98] in use"})
    result = statuses([master, facts("node2")])[("node1", "port-free")]
    assert result.status is Status.FAIL and "20001" in result.detail


def test_a_silent_node_fails_and_warnings_do_not():
    found = statuses([facts("node1")], hosts=("node1", "node2"))
    assert found[("node2", "probe")].status is Status.FAIL
    leftover = facts("node1", leftovers={"processes": ["77: torchrun x"], "shm": ["torch_1"],
                                         "torchelastic_dirs": []})  # fmt: skip
    result = statuses([leftover], hosts=("node1",))[("node1", "leftovers")]
    assert result.status is Status.WARN and "kill 77" in result.fix


def test_loopback_lab_is_a_warning_not_a_failure():
    lab = {"route": {"interface": "lo", "local_address": "127.0.0.1"}}
    found = statuses([facts("node1", **lab), facts("node2", **lab)])
    assert found[("node2", "interface")].status is Status.WARN


def test_collective_names_the_slow_pair():
    result = {
        "world_size": 3,
        "backend": "gloo",
        "all_reduce": [
            {"size_bytes": 1024, "time_us": 100.0, "algbw_gbps": 0.01, "busbw_gbps": 0.013},
            {"size_bytes": 1 << 24, "time_us": 9000.0, "algbw_gbps": 1.8, "busbw_gbps": 2.4},
        ],
        "slowest_pair": {
            "nodes": ["node2", "node3"],
            "bandwidth_bytes_per_sec": 1e8,
            "median_bytes_per_sec": 1e9,
        },
    }
    check = checks.collective_check(result)
    assert check.status is Status.WARN and "node2<->node3" in check.detail
    assert checks.collective_check(None, "srun failed").status is Status.FAIL
    assert bus_factor(4) == pytest.approx(1.5) and bus_factor(1) == 1.0


def test_secrets_are_never_reported():
    env = {"NCCL_SOCKET_IFNAME": "eth0", "NCCL_API_KEY": "k", "HF_TOKEN": "t",
           "MASTER_PASSWORD": "p", "GLOO_SECRET_X": "s", "HOME": "/root"}  # fmt: skip
    assert visible_env(env) == {"NCCL_SOCKET_IFNAME": "eth0"}


def test_marked_output_survives_cut_lines_and_interleaving(capfd):
    text = '{"a": "' + "x" * 3000 + '"}'
    write_marked("M ", text)
    write_marked("M ", '{"b": 1}')
    lines = capfd.readouterr().out.splitlines()
    assert len(lines) == 5 and all(len(line) < 1024 for line in lines)  # srun cuts at 1024
    # srun --label prefixes, another task's lines in between, pieces out of order, a cut line
    mixed = "\n".join(["0: noise", *[f"1: {line}" for line in reversed(lines)], "M x 0 2 {"])
    values = read_marked(mixed, "M ")
    assert {"b": 1} in values and {"a": "x" * 3000} in values and len(values) == 2


def test_submit_script_is_rendered_by_plan_sbatch(tmp_path):
    """One sbatch renderer: the doctor's job is a SubmitRequest whose command is `doctor`."""
    run_dir = tmp_path / "run"
    script = str(batch_plan(3, 2, run_dir, "debug"))
    assert "#SBATCH --nodes=3" in script and "#SBATCH --partition=debug" in script
    assert "#SBATCH --ntasks-per-node=2" in script and "#SBATCH --cpus-per-task=1" in script
    assert f"#SBATCH --output={run_dir}/logs/slurm-%j.out" in script
    last = shlex.split(script.splitlines()[-1])
    assert last[0] == "exec" and Path(last[1]).name.startswith("python")
    assert last[2:5] == ["-m", "noderun", "doctor"]
    assert last[last.index("--result-file") + 1] == str(run_dir / "doctor.json")
    checklist = Checklist("/w/my train.py", ("/data/a b", "/models"))
    last = shlex.split(str(batch_plan(2, 1, run_dir, None, checklist)).splitlines()[-1])
    assert last[last.index("--script") + 1] == "/w/my train.py"  # quoted through the script
    assert [last[i + 1] for i, word in enumerate(last) if word == "--check-path"] == [
        "/data/a b",
        "/models",
    ]


def test_submit_refuses_a_path_sbatch_cannot_carry(tmp_path):
    """#SBATCH lines are not shell: a quoted path would reach sbatch with its quotes."""
    with pytest.raises(UsageError, match="#SBATCH lines cannot carry"):
        batch_plan(3, 1, tmp_path / "run dir; rm -rf ~", "debug")


def code(script: str | None = "aaaa", noderun: str = "n1", torch: str = "t1") -> dict:
    packages = {
        "noderun": {"version": "0.1.0", "sha256": noderun},
        "torch": {"version": "2.13.0", "sha256": torch},
    }
    digest = {"path": "/w/train.py", "sha256": script, "error": None if script else "No such file"}
    return {"script": digest, "packages": packages}


def test_the_same_code_everywhere_passes_and_old_probes_skip():
    found = statuses([facts("node1", code=code()), facts("node2", code=code())])
    assert found[("node2", "same-code")].status is Status.PASS
    assert "train.py aaaa" in found[("node2", "same-code")].detail
    assert statuses([facts("node1"), facts("node2")])[("node1", "same-code")].status is Status.SKIP


@pytest.mark.parametrize(
    ("node2", "words", "fix"),
    [
        (code(script="bbbb"), "train.py bbbb differs from node1's aaaa", "copy the same "
         "/w/train.py to node2"),
        (code(noderun="n2"), "noderun 0.1.0 n2 differs from node1's n1", "install the same "
         "noderun on node2 as on node1"),
        (code(torch="t2"), "torch 2.13.0 t2 differs from node1's t1", "install the same torch"),
        (code(script=None), "/w/train.py: No such file", "put /w/train.py on node2"),
    ],
    ids=["script", "noderun", "torch", "no-script"],
)  # fmt: skip
def test_different_code_on_a_node_fails_there_naming_the_others(node2, words, fix):
    found = statuses([facts("node1", code=code()), facts("node2", code=node2)])
    result = found[("node2", "same-code")]
    assert result.status is Status.FAIL and words in result.detail and fix in result.fix, result
    assert found[("node1", "same-code")].status is Status.PASS  # a tie: node 0 is the reference


def test_the_odd_node_out_is_the_one_named():
    probes = [facts("node1", code=code(script="cccc")), facts("node2", code=code()),
              facts("node3", code=code())]  # fmt: skip
    found = statuses(probes, hosts=("node1", "node2", "node3"))
    assert found[("node1", "same-code")].status is Status.FAIL
    assert "differs from node2, node3's aaaa" in found[("node1", "same-code")].detail
    assert found[("node3", "same-code")].status is Status.PASS


def test_a_check_path_missing_on_a_node_fails_there():
    seen = [{"path": "/data/digits", "exists": True, "kind": "dir"}]
    absent = [{"path": "/data/digits", "exists": False, "kind": None}]
    found = statuses([facts("node1", paths=seen), facts("node2", paths=absent)])
    assert found[("node1", "paths")].status is Status.PASS
    result = found[("node2", "paths")]
    assert result.status is Status.FAIL and "/data/digits not found on node2" in result.detail
    assert "mount or copy /data/digits on node2" in result.fix
    assert statuses([facts("node1", paths=[])])[("node1", "paths")].status is Status.SKIP


def test_code_facts_hash_files_and_packages_without_importing_torch(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("print(1)\n")
    probe = (
        "import json, sys; from noderun.doctor.fingerprint import code_facts, path_facts; "
        f"print(json.dumps([code_facts({str(script)!r}), path_facts([{str(tmp_path)!r}, "
        "'/nonexistent/x']), 'torch' in sys.modules]))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    found, paths, imported = json.loads(done.stdout)
    assert found["script"]["sha256"] == hashlib.sha256(b"print(1)\n").hexdigest()
    assert found["packages"]["torch"]["basis"] == "RECORD"  # a wheel: pip's per-file hashes
    assert found["packages"]["noderun"]["sha256"]  # editable here: its .py files
    assert [p["exists"] for p in paths] == [True, False] and not imported
    script.write_text("print(2)\n")
    assert fingerprint.file_digest(str(script))["sha256"] != found["script"]["sha256"]
