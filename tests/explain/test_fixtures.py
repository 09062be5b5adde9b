"""`noderun explain` on real logs of real failures (fixtures/README.md: how each was made)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from noderun.explain import CAUSES, Tier, examine, explain
from noderun.explain.scanner import Scanner

FIXTURES = Path(__file__).parent / "fixtures"

# fixture -> (root cause, evidence file name, a word of the evidence line, also-found causes)
CASES = {
    "run_crash": ("rank-crashed", "rank1.log", "deliberate crash on rank 1", set()),
    "run_sigkill": ("rank-crashed", "node1.agent.log", "Signal 9 (SIGKILL) received", set()),
    "run_oom": ("out-of-memory", "rank1.log", "can't allocate memory", {"rank-crashed"}),
    "run_missing_file": ("storage-missing", "rank1.log", "No such file", {"rank-crashed"}),
    "run_hang": ("collective-timeout", "rank0.log", "Timed out waiting 6000ms", {"rank-crashed"}),
    "run_stalled": (
        "stalled-rank",
        "stall-20261123-225944.txt",
        "rank 1 on localhost/0 stuck in load_batch() at stuck_rank.py:43",
        {"rank-crashed"},
    ),
    "run_deadlock": (
        "collective-deadlock",
        "stall-20261123-225956.txt",
        "rank 1 in all_gather",
        {"rank-crashed"},
    ),
    "console/stalled.log": ("stalled-rank", "stalled.log", "rank 1 on localhost/0", set()),
    "console/deadlock.log": ("collective-deadlock", "deadlock.log", "rank 0 in all_reduce", set()),
    "console/sigkill.log": ("rank-crashed", "sigkill.log", "killed by SIGKILL", set()),
    "console/oom.log": ("out-of-memory", "oom.log", "can't allocate memory", {"rank-crashed"}),
    "console/missing_file.log": (
        "storage-missing",
        "missing_file.log",
        "Errno 2",
        {"rank-crashed"},
    ),
    "console/hang.log": ("collective-timeout", "hang.log", "for recv operation", set()),
    "torch/port_in_use.log": ("port-in-use", "port_in_use.log", "EADDRINUSE", set()),
    "torch/port_in_use_noderun.log": ("port-in-use", "port_in_use_noderun.log", "in use", set()),
    # nobody ever listened at MASTER_PORT: c10d retries a refused connect silently (socket.cpp)
    # until its timeout, which reads the same as a master that came late: rank 0 never joined
    "torch/connection_refused.log": (
        "rendezvous-timeout",
        "connection_refused.log",
        "trying to connect",
        set(),
    ),
    "torch/wrong_master.log": (
        "connection-refused",
        "wrong_master.log",
        "Name or service not known",
        {"rendezvous-timeout"},  # the store's timeout after the name never resolved
    ),
    "torch/wrong_interface.log": (
        "network-unreachable",
        "wrong_interface.log",
        "Unable to find address for: nosuch0",
        set(),
    ),
    "torch/rendezvous_timeout_2of3.log": (
        "rendezvous-timeout",
        "rendezvous_timeout_2of3.log",
        "2/3 clients joined",
        set(),
    ),
    "torch/rendezvous_timeout_noderun.log": (
        "rendezvous-timeout",
        "rendezvous_timeout_noderun.log",
        "never arrived: ranks 2",
        {"rank-crashed"},
    ),
    "torch/rendezvous_timeout_torchrun.log": (
        "rendezvous-timeout",
        "rendezvous_timeout_torchrun.log",
        "RendezvousTimeoutError",
        set(),
    ),
    "slurm/missing_srun.out": ("missing-launcher", "missing_srun.out", "1/4 clients joined", set()),
    "slurm/missing_srun_noderun.out": (
        "missing-launcher",
        "missing_srun_noderun.out",
        "started without srun",
        set(),
    ),
    "slurm/lightning_no_srun.out": (
        "missing-launcher",
        "lightning_no_srun.out",
        "GLOBAL_RANK: 0, MEMBER: 1/4",
        {"time-limit"},  # it hung until the time limit: the hang is the cause
    ),
    "slurm/storage_missing.out": (
        "storage-missing",
        "storage_missing.out",
        "No such file",
        {"rank-crashed"},
    ),
    "reconstructed/seed002_missing_srun.log": (
        "missing-launcher",
        "seed002_missing_srun.log",
        "1/16 clients joined",
        {"rendezvous-timeout"},
    ),
    "reconstructed/device_ordinal.log": (
        "device-ordinal",
        "device_ordinal.log",
        "invalid device ordinal",
        set(),
    ),
    "reconstructed/flare_init_timeout.log": (
        "fl-client-conflict",
        "flare_init_timeout.log",
        "flare.init timeout",
        set(),
    ),
    "torch/finalization_abort_torchrun.log": (
        "finalization-abort",
        "finalization_abort_torchrun.log",
        "terminate called without an active exception",
        {"rank-crashed"},
    ),
    "reconstructed/slurm_cgroup_oom.out": (
        "out-of-memory",
        "slurm_cgroup_oom.out",
        "Detected 1 oom-kill event(s) in StepId=412.batch cgroup",
        {"rank-crashed"},
    ),
    "reconstructed/nccl_version_mismatch.log": (
        "version-mismatch",
        "nccl_version_mismatch.log",
        "NCCL version 2.14.3",
        {"rank-crashed", "network-unreachable", "nccl-version-bug"},  # IB errors; ncclInternalError
    ),
    "reconstructed/version_mismatch.log": (
        "version-mismatch",
        "version_mismatch.log",
        "undefined symbol",
        set(),
    ),
}


@pytest.mark.parametrize("fixture", sorted(CASES))
def test_root_cause_of_real_failure(fixture):
    cause, evidence_file, words, also = CASES[fixture]
    findings = explain([str(FIXTURES / fixture)])
    root = findings[0]
    assert root.cause == cause, [(f.cause, f.evidence) for f in findings]
    assert Path(root.evidence.file).name == evidence_file
    assert words in root.evidence.text
    assert root.evidence.line >= 1
    lines = Path(root.evidence.file).read_text(errors="replace").splitlines()
    assert lines[root.evidence.line - 1].strip().startswith(root.evidence.text[:80])
    assert root.tier < Tier.WARNING
    assert {f.cause for f in findings[1:]} == also
    assert root.fix and root.summary


def test_every_cause_id_of_the_issue_is_known():
    issue_ids = {
        "missing-launcher",
        "device-ordinal",
        "port-in-use",
        "network-unreachable",
        "connection-refused",
        "rendezvous-timeout",
        "collective-timeout",
        "rank-crashed",
        "out-of-memory",
        "fl-client-conflict",
        "storage-missing",
        "version-mismatch",
        "finalization-abort",  # issue 8.1: torch 2.13's gloo teardown abort is its own cause
        "unknown",
        "stalled-rank",  # issue 17: hung jobs
        "collective-deadlock",
    }
    from_corpus = {  # issue 25: causes real logs of the corpus needed
        "ssh-unreachable",
        "shm-exhausted",
        "duplicate-gpu",
        "link-fault",
        "time-limit",
        "node-failure",
        "interrupted",
        "preempted",
        "gpu-fault",
        "nccl-config",
        "nccl-version-bug",
        "disk-full",  # the third pass: ENOSPC/EDQUOT on checkpoints and caches
        "gpu-unavailable",  # the sixth pass: no CUDA device, or all busy (CUDA errors 100, 46)
        "memlock-limit",  # the sixth pass: RDMA registration under a low ulimit -l
        "resource-request",  # the tenth pass: Slurm refused the request (sbatch/srun/salloc)
        "download-failed",  # the tenth pass: no internet on a node and no cached copy
    }
    from_verbs = {"cancelled"}  # issue 28: `noderun cancel` (tests/verbs/test_manage_local.py)
    assert set(CAUSES) == issue_ids | from_corpus | from_verbs
    covered = {case[0] for case in CASES.values()}
    assert covered == issue_ids - {"unknown"}  # unknown: see test_ranking; corpus: test_signatures


def test_python_re_and_re2_find_the_same_lines():
    """The RE2 fast path and the pure-Python fallback agree on every fixture line."""
    fast, slow = Scanner(engine="re2"), Scanner(engine="re")
    files = [p for p in FIXTURES.rglob("*") if p.is_file() and p.suffix in (".log", ".out")]
    assert len(files) > 20
    for path in files:
        assert [(h.line, h.signature) for h in fast.scan(path)] == [
            (h.line, h.signature) for h in slow.scan(path)
        ], path


def test_cli_json_shape_and_text_report():
    target = str(FIXTURES / "run_oom")
    done = subprocess.run(
        [sys.executable, "-m", "noderun", "explain", target, "--json"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1  # a failure was found
    findings = json.loads(done.stdout)["findings"]
    assert findings[0]["cause"] == "out-of-memory"
    assert set(findings[0]) >= {"cause", "summary", "fix", "evidence"}
    assert set(findings[0]["evidence"]) == {"file", "line", "text"}
    done = subprocess.run(
        [sys.executable, "-m", "noderun", "explain", target], capture_output=True, text=True
    )
    assert done.returncode == 1
    first = done.stdout.splitlines()
    assert first[0].startswith("root cause: out-of-memory")
    assert "rank1.log:5" in first[1]
    assert any(line.startswith("also: rank-crashed") for line in first)


# healthy runs, produced for real (fixtures/README.md): no error-level finding, no failure
HEALTHY = {
    "healthy/run_noderun": ("finished", "completed"),
    "healthy/noderun_console.log": ("finished", "job completed"),
    "healthy/torchrun_plain.log": (None, None),
    "healthy/srun_plain.out": (None, None),
    "healthy/lightning_srun.out": ("finished", "max_epochs=2"),
    "reconstructed/nccl_warnings_success.log": (None, None),
}


@pytest.mark.parametrize("fixture", sorted(HEALTHY))
def test_a_healthy_run_has_no_failure(fixture):
    sign, words = HEALTHY[fixture]
    verdict = examine([str(FIXTURES / fixture)])
    assert verdict.failures == [], [(f.cause, f.evidence.text) for f in verdict.failures]
    assert all(f.tier >= Tier.WEAK for f in verdict.warnings) or verdict.finished
    assert verdict.finished is (sign == "finished")
    if words:
        assert any(words in s.evidence.text or words in s.what for s in verdict.seen)


def test_lightning_member_line_is_no_alarm_once_every_rank_registered():
    verdict = examine([str(FIXTURES / "healthy" / "lightning_srun.out")])
    assert "MEMBER: 1/4" in (FIXTURES / "healthy" / "lightning_srun.out").read_text()
    assert not any(f.cause == "missing-launcher" for f in verdict.failures + verdict.warnings)
    assert any("every rank joined" in s.what for s in verdict.seen)


def test_nccl_warnings_of_a_run_that_went_on_are_warnings():
    verdict = examine([str(FIXTURES / "reconstructed" / "nccl_warnings_success.log")])
    assert [f.cause for f in verdict.warnings] == ["nccl-warning"]
    assert verdict.warnings[0].occurrences == 2


def test_cli_says_no_failure_found_and_what_it_saw():
    target = str(FIXTURES / "healthy" / "lightning_srun.out")
    done = subprocess.run(
        [sys.executable, "-m", "noderun", "explain", target], capture_output=True, text=True
    )
    assert done.returncode == 0
    lines = done.stdout.splitlines()
    assert lines[0] == "no failure found: the run finished"
    assert any(line.startswith("seen: the run finished") for line in lines)
    done = subprocess.run(
        [sys.executable, "-m", "noderun", "explain", target, "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    report = json.loads(done.stdout)
    assert report["verdict"] == "no failure found" and report["findings"] == []
