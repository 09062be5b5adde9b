"""Checks of a run made under SLURM: sacct_summary.txt and the job's final state."""

from __future__ import annotations

from pathlib import Path

from noderun.backends import slurm
from noderun.backends.slurm import SACCT_SUMMARY
from noderun.backends.slurm_text import JobState, is_step, nodes_with_steps, parse_table
from noderun.errors import TopologyError
from noderun.verify.evidence import RunEvidence
from noderun.verify.model import Check, Expectations, failed, passed, warned


def is_slurm_run(ev: RunEvidence) -> bool:
    return ev.run_record.get("backend") == "slurm" or bool(ev.run_record.get("job_id"))


def job_id_of(ev: RunEvidence) -> str:
    return str(ev.run_record.get("job_id", ""))


def summary_rows(path: Path) -> list[dict[str, str]]:
    """The fixed-width table of sacct_summary.txt as dicts (JobID, State, Elapsed, NodeList…)."""
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return []
    if len(lines) < 2 or not lines[1].startswith("JobID"):
        return []
    return parse_table(lines[1:])


def job_nodes(rows: list[dict[str, str]], job: dict[str, str]) -> str:
    """The job's nodes: its row's NodeList with its steps' (slurmdbd can hold the job row with
    only the batch host for a while after the job ended; the steps' records are not late)."""
    steps = [
        r.get("NodeList", "")
        for r in rows
        if r.get("JobID", "").startswith(f"{job.get('JobID')}.") and is_step(r.get("JobID", ""))
    ]
    try:
        return nodes_with_steps(job.get("NodeList", ""), steps)[0]
    except TopologyError:
        return job.get("NodeList", "")


def check_sacct_summary(ev: RunEvidence, _: Expectations) -> Check:
    path = ev.run_dir / SACCT_SUMMARY
    if not path.is_file():
        return failed(
            "sacct-summary",
            f"{SACCT_SUMMARY} is missing",
            "noderun writes it when the SLURM step ends; was the batch script killed first?",
        )
    rows = summary_rows(path)
    if not rows:
        first = path.read_text(errors="replace").splitlines()[:1]
        return warned("sacct-summary", f"no accounting records: {' '.join(first)[:150]}")
    job = next((r for r in rows if r.get("JobID") == job_id_of(ev)), rows[0])
    recorded = JobState(job.get("JobID", ""), job.get("State", "UNKNOWN"))
    if not recorded.final and "end_time" in ev.run_record:
        now, source = final_state(ev)
        later = f"; {source} says {now.state} now" if now is not None and now.final else ""
        return warned(
            "sacct-summary",
            f"{len(rows)} records, written while job {job.get('JobID')} was still "
            f"{recorded.state} (not its final state){later}",
        )
    return passed(
        "sacct-summary", f"{len(rows)} records; job {job.get('JobID')} {job.get('State')}"
    )


def final_state(ev: RunEvidence) -> tuple[JobState | None, str]:
    """The job's state from scontrol/sacct now, else the one recorded in sacct_summary.txt."""
    job_id = job_id_of(ev)
    record = slurm.job_record(job_id) if slurm.available() else None
    if record is not None:
        return record.state, record.source
    rows = summary_rows(ev.run_dir / SACCT_SUMMARY)
    job = next((r for r in rows if r.get("JobID") == job_id), None)
    if job is None:
        return None, ""
    return JobState(job_id, job.get("State", "UNKNOWN"), nodes=job.get("NodeList", "")), (
        SACCT_SUMMARY
    )


def check_job_state(ev: RunEvidence, _: Expectations) -> Check:
    job_id = job_id_of(ev)
    if not job_id:
        return failed("job-state", "run.json names no SLURM job id")
    state, source = final_state(ev)
    if state is None:
        return failed(
            "job-state",
            f"job {job_id} is unknown to scontrol/sacct and to {SACCT_SUMMARY}",
            "run verify on the cluster, with accounting (sacct) enabled",
        )
    where = f" on {state.nodes}" if state.nodes else ""
    if state.status == "completed":
        return passed("job-state", f"job {job_id} COMPLETED{where} ({source})")
    if state.status in ("running", "pending") and ev.run_record.get("status") == "completed":
        return warned("job-state", f"job {job_id} still {state.state}: the batch script goes on")
    return failed(
        "job-state",
        f"job {job_id} {state.state}{where} ({source})",
        f"run `noderun explain {job_id}` (or on the run directory) for the cause and the fix",
    )


SLURM_CHECKS = {"sacct-summary": check_sacct_summary, "job-state": check_job_state}
