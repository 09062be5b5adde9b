"""``noderun verify JOBID`` of a job noderun did not start (a plain sbatch): judged from what
SLURM knows — the job's state and exit code, its steps in sacct, its nodes — and from its
StdOut/StdErr files, scanned with explain's signatures as a run directory's logs are."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from noderun.backends import slurm
from noderun.backends.slurm_text import JOB_ID, JobRecord, parse_table, state_status
from noderun.errors import UsageError
from noderun.verify.evidence import file_signs
from noderun.verify.model import Check, Expectations, Report, failed, passed, skipped, warned


def plain_job(target: str) -> JobRecord | None:
    """The job's record when ``target`` is a SLURM job id with no noderun run directory."""
    if not JOB_ID.match(target) or Path(target).exists() or not slurm.available():
        return None
    record = slurm.job_record(target)
    if record is None:
        return None  # resolve_target says "unknown SLURM job id"
    from noderun.verify.target import resolve_target

    try:
        resolve_target(target)
    except UsageError:
        return record
    return None  # noderun's own run directory: the full verify applies


def _check_state(record: JobRecord) -> Check:
    state = record.state
    where = f" on {state.nodes}" if state.nodes else ""
    if state.status == "completed":
        return passed("job-state", f"job {record.job_id} COMPLETED{where} ({record.source})")
    if not state.final:
        return warned("job-state", f"job {record.job_id} still {state.state}")
    code = f", exit code {state.exit_code}" if state.exit_code is not None else ""
    sig = f", signal {state.signal}" if state.signal else ""
    return failed(
        "job-state",
        f"job {record.job_id} ended {state.state}{code}{sig}{where} ({record.source})",
        f"see `noderun explain {record.job_id}`",
    )


def _steps(job_id: str, final: bool) -> list[dict[str, str]]:
    text = slurm.sacct_summary(job_id, job_final=final)
    lines = text.splitlines()
    return parse_table(lines[1:]) if lines and lines[0].startswith("sacct for job") else []


def _check_steps(job_id: str, rows: list[dict[str, str]]) -> Check:
    steps = [r for r in rows if "." in r.get("JobID", "")]
    if not rows:
        return skipped("steps", f"no accounting records of job {job_id} (sacct)")
    ran = [r for r in steps if not r["JobID"].endswith((".batch", ".extern"))]
    # a failed srun step first: the batch step fails because of it
    ordered = ran + [r for r in steps if r not in ran]
    bad = [r for r in ordered if state_status(r.get("State", "")) not in ("completed", "running")]
    if bad:
        first = bad[0]
        return failed(
            "steps",
            f"step {first['JobID']} {first.get('State')} (exit {first.get('ExitCode')}) on "
            f"{first.get('NodeList', '?')}",
            f"see `noderun explain {job_id}`",
        )
    if not ran:
        return warned(
            "steps",
            "the batch script started no srun step: everything ran on the first node only",
            "start the training under srun (or `noderun run` in the script)",
        )
    shown = ", ".join(f"{r['JobID']} on {r.get('NodeList', '?')}" for r in ran[:4])
    return passed("steps", f"{len(ran)} step(s) completed: {shown}")


def _check_logs(record: JobRecord) -> tuple[Check, Check]:
    """The output files exist; explain finds no failure in them (rank-logs)."""
    files = [Path(p) for p in record.output_files()]
    readable = [p for p in files if p.is_file()]
    if not readable:
        names = ", ".join(map(str, files)) or "none recorded"
        output = failed(
            "output-files",
            f"the job's output files cannot be read here ({names})",
            "pass them to `noderun explain` by path",
        )
        return output, skipped("rank-logs", "no output file to scan")
    output = passed("output-files", ", ".join(map(str, readable)))
    from noderun.explain import examine

    verdict = examine([str(p) for p in readable])
    if verdict.failures:
        root = verdict.failures[0]
        where = f"{Path(root.evidence.file).name}:{root.evidence.line}"
        detail = f"{root.cause}: {root.summary} ({where}: {root.evidence.text[:160]})"
        return output, failed("rank-logs", detail, root.fix)
    return output, passed("rank-logs", "no failure signature in the job's output")


def _check_world(record: JobRecord, expect: Expectations) -> Check:
    """Lightning's 'Starting with N processes' (the same sign verify reads in run logs)."""
    sign = file_signs([p for p in map(Path, record.output_files()) if p.is_file()]).get(
        "registered"
    )
    if sign is None or not sign.value.isdigit():
        return skipped("world-size", "no line of the job's output gives the world size")
    seen = int(sign.value)
    if expect.world_size is not None and seen != expect.world_size:
        return failed(
            "world-size",
            f"{seen} processes registered ({sign.where}), {expect.world_size} asked",
            "check the srun task layout and the script's devices/num_nodes",
        )
    return passed("world-size", f"{seen} processes registered ({sign.where})")


def verify_job(record: JobRecord, expect: Expectations) -> Report:
    state = record.state
    report = Report(
        record.job_id,  # verify's closing hint: `noderun explain JOBID`
        facts={
            "judged_from": "SLURM (no noderun run directory)",
            "slurm_job_id": record.job_id,
            "slurm_state": state.state,
            "slurm_exit_code": state.exit_code,
            "slurm_nodes": state.nodes,
        },
    )
    rows = _steps(record.job_id, state.final)
    output, logs = _check_logs(record)
    for check in (
        _check_state(record),
        _check_steps(record.job_id, rows),
        output,
        _check_world(record, expect),
        logs,
    ):
        report.add(skipped(check.name, "skipped (--skip)") if check.name in expect.skip else check)
    report.failed_run = state.final and state.status != "completed"
    report.facts = {k: v for k, v in report.facts.items() if v not in (None, "")}
    return report


def verify_if_plain(
    target: str, expect: Expectations, show: Callable[[Report], None], as_json: bool
) -> int | None:
    """verify's exit code for a job noderun did not start (report printed); None otherwise."""
    record = plain_job(target)
    if record is None:
        return None
    report = verify_job(record, expect)
    if as_json:
        import json

        print(json.dumps(report.to_dict(), indent=2, default=str))
    else:
        show(report)
    return 0 if report.healthy else 1
