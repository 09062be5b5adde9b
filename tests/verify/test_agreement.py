"""verify and explain report what the run left, one way: the failed rank in words, epochs
counted once, a job state recorded before the job ended is not passed as final."""

from __future__ import annotations

from pathlib import Path

import pytest

from noderun import failures
from noderun.explain.sources import failed_rank
from noderun.verify.evidence import Loaded, RunEvidence
from noderun.verify.model import Expectations
from noderun.verify.run_checks import check_epochs, check_run_status
from noderun.verify.slurm_checks import check_sacct_summary
from noderun.verify.verifier import facts

SLURM_SENTENCE = "rank 1 (node 0 on node1, local rank 1) failed first: ValueError: boom"


@pytest.mark.parametrize(
    ("failure", "hosts", "expected"),
    [
        ({"rank": 1, "reason": SLURM_SENTENCE}, [], SLURM_SENTENCE),
        (
            {"rank": 3, "node_rank": 1, "local_rank": 1, "reason": "killed by SIGKILL"},
            ["a", "b"],
            "rank 3 (node 1 on b, local rank 1): killed by SIGKILL",
        ),
        ({"rank": 2, "reason": "exit code 1"}, [], "rank 2: exit code 1"),
        ({"node_rank": 0, "reason": "agent failed"}, [], "node 0: agent failed"),
        ({"exit_code": 7}, [], "exit code 7"),
    ],
)
def test_a_failure_is_described_without_none(failure, hosts, expected) -> None:
    assert failures.describe(failure, hosts) == expected
    assert failed_rank({"failure": failure, "hosts": hosts}) == expected


def _evidence(tmp_path: Path, record: dict, rows: list[dict] | None = None, source="noderun"):
    header = list(rows[0]) if rows else []
    return RunEvidence(
        run_dir=tmp_path,
        run=Loaded(tmp_path / "run.json", record),
        runtime=Loaded(tmp_path / "runtime.json", error="missing"),
        metrics_header=header,
        metrics=Loaded(tmp_path / "metrics.csv", rows)
        if rows
        else Loaded(tmp_path / "metrics.csv", error="missing"),
        metrics_source=source,
    )


def test_verify_names_the_failed_rank_once_and_never_node_none(tmp_path: Path) -> None:
    record = {"status": "failed", "exit_code": 1, "failure": {"rank": 1, "reason": SLURM_SENTENCE}}
    check = check_run_status(_evidence(tmp_path, record), Expectations())
    assert check.detail == f"run failed: {SLURM_SENTENCE}"


def test_lightning_epochs_are_counted_once_in_the_check_and_the_facts(tmp_path: Path) -> None:
    rows = [  # Lightning's CSVLogger: a train row and a val row per epoch
        {"epoch": str(e), "step": str(s), "train_loss": "0.5", "val_loss": ""}
        for e in range(8)
        for s in (2 * e, 2 * e + 1)
    ]
    ev = _evidence(tmp_path, {"status": "completed"}, rows, source="lightning_logs/metrics.csv")
    check = check_epochs(ev, Expectations(epochs=8))
    assert check.status.value == "PASS" and check.detail.startswith("8 epochs")
    assert facts(ev)["epochs_completed"] == 8


def test_no_metrics_means_epochs_unknown_not_zero(tmp_path: Path) -> None:
    assert "epochs_completed" not in facts(_evidence(tmp_path, {"status": "completed"}))


def test_a_summary_written_while_the_job_ran_is_not_its_final_state(
    tmp_path: Path, monkeypatch
) -> None:
    from noderun.verify import slurm_checks

    monkeypatch.setattr(slurm_checks.slurm, "available", lambda: False)
    (tmp_path / "sacct_summary.txt").write_text(
        "sacct -j 42\n"
        "JobID        State      Elapsed  NodeList\n"
        "42           RUNNING    00:00:09 node[1-2]\n"
    )
    record = {"status": "completed", "job_id": "42", "end_time": 5.0}
    check = check_sacct_summary(_evidence(tmp_path, record), Expectations())
    assert check.status.value == "WARN" and "RUNNING" in check.detail, check
    (tmp_path / "sacct_summary.txt").write_text(
        "sacct -j 42\n"
        "JobID        State      Elapsed  NodeList\n"
        "42           COMPLETED  00:00:09 node[1-2]\n"
    )
    assert check_sacct_summary(_evidence(tmp_path, record), Expectations()).status.value == "PASS"
