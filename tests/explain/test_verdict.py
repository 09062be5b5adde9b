"""How explain weighs what it found: finished runs, refuted findings, aborts after errors."""

from __future__ import annotations

from pathlib import Path

from noderun.explain import examine


def _log(tmp_path: Path, text: str) -> str:
    path = tmp_path / "job.log"
    path.write_text(text)
    return str(path)


def test_an_abort_after_an_error_is_not_a_finalization_abort(tmp_path: Path) -> None:
    log = _log(
        tmp_path,
        "rank 1: step 3\nValueError: bad batch shape\nterminate called without an active "
        "exception\n",
    )
    verdict = examine([log])
    assert [f.cause for f in verdict.failures] == ["rank-crashed"]
    assert "ValueError" in verdict.failures[0].evidence.text


def test_an_abort_after_clean_output_is_its_own_cause(tmp_path: Path) -> None:
    log = _log(
        tmp_path,
        "rank 1: final loss 0.12\nterminate called without an active exception\n"
        "noderun: job failed: rank 1 (node 0, local rank 1) killed by SIGABRT\n",
    )
    verdict = examine([log])
    assert [f.cause for f in verdict.failures] == ["finalization-abort", "rank-crashed"]
    assert "noderun run" in verdict.failures[0].fix and "upgrade torch" in verdict.failures[0].fix


def test_a_launcher_failure_outweighs_a_finished_sign(tmp_path: Path) -> None:
    log = _log(
        tmp_path,
        "`Trainer.fit` stopped: `max_epochs=2` reached.\n"
        "srun: error: node2: task 3: Aborted (core dumped)\n",
    )
    verdict = examine([log])
    assert verdict.failed and not verdict.finished


def test_different_nccl_versions_in_a_finished_run_are_a_warning(tmp_path: Path) -> None:
    log = _log(
        tmp_path,
        "NCCL version 2.18.1+cuda12.1\nNCCL version 2.19.3+cuda12.2\n"
        "`Trainer.fit` stopped: `max_steps=100` reached.\n",
    )
    verdict = examine([log])
    assert verdict.finished and not verdict.failed
    assert [w.cause for w in verdict.warnings] == ["version-mismatch"]
    assert "2.18.1+cuda12.1, 2.19.3+cuda12.2" in verdict.warnings[0].summary


def test_lightning_member_line_alone_still_means_a_missing_launcher(tmp_path: Path) -> None:
    log = _log(tmp_path, "Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/4\n")
    assert [f.cause for f in examine([log]).failures] == ["missing-launcher"]


def test_a_hang_stopped_from_outside_is_the_hang(tmp_path: Path) -> None:
    """A reason-less cancel (scancel, Ctrl-C) of a job that hung is what a user does about the
    hang: the hang is the cause, the cancel its consequence, as with a time limit. Without a
    hang, the cancel stays the answer. (Tuning case torchmetrics-2300, Lightning waiting for
    95 members that were never started.)"""
    cancel = "slurmstepd: error: *** JOB 168885 ON n1 CANCELLED AT 2023-08-31T18:04:42 ***\n"
    log = _log(tmp_path, "Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/96\n" + cancel)
    assert [f.cause for f in examine([log]).failures] == ["missing-launcher", "interrupted"]
    alone = _log(tmp_path, "epoch 3 loss 0.21\n" + cancel)
    assert [f.cause for f in examine([alone]).failures] == ["interrupted"]


_REQUEUE = (
    "slurmstepd-node1: error: *** STEP 697.0 ON node1 CANCELLED AT 2026-11-25T15:15:21 "
    "DUE TO JOB REQUEUE ***\n"
)
_TERMINATED = "srun: error: node1: tasks 0-1: Terminated\nsrun: error: node2: task 2: Terminated\n"
_FINISHED = "`Trainer.fit` stopped: `max_epochs=2` reached.\n"


def test_a_requeued_job_that_then_finished_is_no_failure(tmp_path: Path) -> None:
    """A preempted job's first attempt ends with srun's 'Terminated' lines: the requeue's."""
    verdict = examine([_log(tmp_path, _REQUEUE + _TERMINATED + _FINISHED)])
    assert verdict.finished and not verdict.failed
    assert "rank-crashed" not in [w.cause for w in verdict.warnings]


def test_terminated_tasks_without_a_requeue_are_a_failure(tmp_path: Path) -> None:
    verdict = examine([_log(tmp_path, _TERMINATED + _FINISHED)])
    assert verdict.failed and not verdict.finished
    assert verdict.failures[0].cause == "rank-crashed"
    assert "Terminated" in verdict.failures[0].evidence.text


def test_a_requeue_does_not_hide_a_crash_after_the_restart(tmp_path: Path) -> None:
    log = _log(
        tmp_path,
        _REQUEUE + _TERMINATED + "ValueError: bad batch shape\n"
        "srun: error: node2: task 3: Exited with exit code 1\n",
    )
    verdict = examine([log])
    assert verdict.failed and verdict.failures[0].cause == "rank-crashed"
    assert "ValueError" in verdict.failures[0].evidence.text


def test_a_task_killed_past_the_requeues_grace_is_no_failure(tmp_path: Path) -> None:
    """A rank slower than KillWait to end after the requeue's SIGTERM is SIGKILLed: srun says
    'Killed' (seen on the lab under load: job 173 of test_preemption_slurm)."""
    killed = "srun: error: node1: task 0: Terminated\nsrun: error: node2: task 1: Killed\n"
    verdict = examine([_log(tmp_path, _REQUEUE + killed + _FINISHED)])
    assert verdict.finished and not verdict.failed, verdict.failures
    killed_alone = examine([_log(tmp_path, "srun: error: node2: task 1: Killed\n")])
    assert killed_alone.failed and killed_alone.failures[0].cause == "rank-crashed"
