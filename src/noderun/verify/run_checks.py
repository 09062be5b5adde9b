"""Checks of a run directory: run.json, runtime.json, metrics.csv, checkpoint, rank logs."""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Iterator
from pathlib import Path

from noderun import failures, rundir, timeline
from noderun.explain.scanner import Hit, Scanner
from noderun.explain.signatures import Tier
from noderun.runtime.metrics import COLUMNS, METRICS_STARTED, STEP_COLUMNS
from noderun.verify.checkpoint_checks import check_checkpoint
from noderun.verify.evidence import RunEvidence, load_json, number
from noderun.verify.group_checks import GROUP_CHECKS
from noderun.verify.model import Check, Expectations, failed, passed, skipped, warned

CheckFn = Callable[[RunEvidence, Expectations], Check]

_RANK_LOG = re.compile(r"^rank(\d+)\.log$")


def explain_hint(run_dir: Path) -> str:
    return f"run `noderun explain {run_dir}` for the cause and the fix"


def check_run_json(ev: RunEvidence, _: Expectations) -> Check:
    if not ev.run.ok:
        return failed("run-json", ev.run.error, "was the run started with `noderun run`?")
    missing = [k for k in ("status", "topology", "start_time") if k not in ev.run_record]
    if missing:
        return failed("run-json", f"run.json lacks {', '.join(missing)}", "rerun with noderun")
    return passed("run-json", f"started {ev.run_record['start_time']}")


def check_run_status(ev: RunEvidence, _: Expectations) -> Check:
    record = ev.run_record
    if not record:
        return skipped("run-status", "no run.json")
    status, code = record.get("status"), record.get("exit_code")
    codes = record.get("node_exit_codes") or {}
    if status == "completed" and code == 0 and all(c == 0 for c in codes.values()):
        every = f", every node's launcher exited 0 ({len(codes)})" if codes else ""
        return passed(
            "run-status", f"completed, exit code 0{every}, {record.get('duration_sec', '?')} s"
        )
    if status == "running" and "end_time" not in record:
        if died := rundir.stale_lock(ev.run_dir):
            return failed(
                "run-status",
                f"run.json says running, but {died}",
                "resume it in place (`noderun run --run-dir` it again), or pass a new --run-dir",
            )
        detail = "run.json says running and has no end time: still running, or the launcher died"
        return failed("run-status", detail, explain_hint(ev.run_dir))
    failure = record.get("failure") or {}
    if record.get("interrupted_by"):
        what = f"interrupted by {record['interrupted_by']}"
    elif failure:
        what = failures.describe(failure, record.get("hosts") or [])
    else:
        what = f"the job: exit code {code}"
    return failed("run-status", f"run {status}: {what}", explain_hint(ev.run_dir))


def _index(header: list[str]) -> str | None:
    """The column that numbers metrics rows: ``epoch``, or ``step`` for step-based training."""
    return next((c for c in ("epoch", "step") if c in header), None)


def _started(ev: RunEvidence, stage: str) -> bool:
    """The run's timeline says a rank reached ``stage`` (it meant to write that evidence)."""
    return any(row["stage"] == stage for row in timeline.gather(ev.run_dir))


def check_metrics_file(ev: RunEvidence, _: Expectations) -> Check:
    if (
        not ev.metrics.ok
        and ev.metrics.error.endswith("is missing")
        and not _started(ev, METRICS_STARTED)
    ):
        # a script that chose to write no metrics is judged on the rest (--require makes it FAIL)
        return skipped(
            "metrics",
            "no metrics.csv (noderun's MetricsLogger or TrainingLoop) and no Lightning CSVLogger "
            "metrics.csv under the run directory",
        )
    if not ev.metrics.ok:
        return failed("metrics", ev.metrics.error, "log epochs with noderun.runtime.metrics")
    name = "metrics.csv" if ev.metrics_source == "noderun" else ev.metrics_source
    loss = "train_loss" if ev.metrics_source == "noderun" else None
    index = _index(ev.metrics_header)
    missing = [c for c in (index or "epoch", loss) if c and c not in ev.metrics_header]
    if missing:
        return failed("metrics", f"{name} has no {', '.join(missing)} column")
    if not ev.rows:
        return failed("metrics", f"{name} has a header but no {index} rows")
    detail = f"{len(ev.rows)} rows, {len(ev.metrics_header)} columns"
    if ev.metrics_source != "noderun":
        return passed("metrics", f"{name} (Lightning CSVLogger): {detail}")
    expected = STEP_COLUMNS if index == "step" else COLUMNS
    absent = [c for c in expected if c not in ev.metrics_header]
    if absent:
        return warned("metrics", f"{detail}; without {', '.join(absent)}")
    return passed("metrics", detail)


def check_epochs(ev: RunEvidence, expect: Expectations) -> Check:
    index = _index(ev.metrics_header)
    if not ev.rows or index is None:
        return skipped("epochs", "no metrics rows")
    previous: float | None = None
    for line, row in enumerate(ev.rows, start=2):
        epoch = number(row.get(index))
        if epoch is None or not math.isfinite(epoch) or epoch != int(epoch):
            return failed("epochs", f"metrics.csv line {line}: {index} {row.get(index)!r}")
        repeats = ev.metrics_source != "noderun"  # Lightning logs several rows per epoch
        if previous is not None and (epoch < previous or (epoch == previous and not repeats)):
            return failed(
                "epochs",
                f"metrics.csv line {line}: {index} {int(epoch)} after {int(previous)} "
                "(not increasing: a resumed run logging again, or two writers?)",
                f"log metrics on rank 0 only, once per {index}",
            )
        previous = epoch
    if index == "step":
        count = len({row.get(index) for row in ev.rows})
        return passed("epochs", f"{count} step rows, last step {int(previous or 0)}, increasing")
    count = ev.epochs_completed or 0  # the same count as the epochs_completed fact
    if expect.epochs is not None and count != expect.epochs:
        return failed("epochs", f"{count} epochs completed, {expect.epochs} expected")
    return passed("epochs", f"{count} epochs, last {int(previous or 0)}, increasing")


def _loss_columns(header: list[str]) -> list[str]:
    return [c for c in header if c == "loss" or c.endswith("_loss")]


def check_losses(ev: RunEvidence, _: Expectations) -> Check:
    columns = _loss_columns(ev.metrics_header)
    if not ev.rows or not columns:
        return skipped("losses", "no loss columns")
    for line, row in enumerate(ev.rows, start=2):
        for column in columns:
            value = number(row.get(column))
            # step-based rows may hold only an evaluation (step 0: the model before training)
            step_rows = _index(ev.metrics_header) == "step"
            if (
                value is None
                and column == "train_loss"
                and ev.metrics_source == "noderun"
                and not step_rows
            ):
                return failed("losses", f"metrics.csv line {line}: train_loss is empty")
            if value is not None and not math.isfinite(value):
                return failed(
                    "losses",
                    f"metrics.csv line {line} (epoch {row.get('epoch')}): "
                    f"{column} = {row.get(column)}",
                    "lower the learning rate or check the inputs for NaN",
                )
    last = ev.rows[-1]
    finals = ", ".join(f"{c} {last[c]}" for c in columns if last.get(c))
    return passed("losses", f"all finite; final {finals}")


def check_rank_logs(ev: RunEvidence, _: Expectations) -> Check:
    logs = ev.run_dir / rundir.LOGS
    if not logs.is_dir():
        return failed("rank-logs", "no logs/ directory", "run with `noderun run`")
    world = ev.runtime_record.get("world_size") or (ev.run_record.get("topology") or {}).get(
        "world_size"
    )
    present = {int(m.group(1)) for p in logs.iterdir() if (m := _RANK_LOG.match(p.name))}
    # a rank that printed nothing has no log: silence is not an error
    silent = sorted(set(range(world)) - present) if isinstance(world, int) else []
    errors = sorted(_rank_errors(logs, present))
    if errors:
        first, *others = errors
        also = f"; then rank(s) {_ranks([e[1] for e in others])} failed too" if others else ""
        return failed(
            "rank-logs", f"rank {first[1]} failed first: {first[2]}{also}", explain_hint(ev.run_dir)
        )
    quiet = f"; rank(s) {_ranks(silent)} printed nothing" if silent else ""
    return passed("rank-logs", f"{len(present)} rank log(s), no errors{quiet}")


def _rank_errors(logs: Path, ranks: set[int]) -> Iterator[tuple[float, int, str]]:
    """(time, rank, error) per rank with an error record or a traceback in its log."""
    for rank in ranks:
        record = load_json(logs / f"rank{rank}.error.json")
        if record.ok:
            error = str(record.data.get("error", "an exception"))[:200]
            yield float(record.data.get("time", math.inf)), rank, error
            continue
        hit = _first_error(logs / f"rank{rank}.log")
        if hit is not None:
            yield (
                math.inf,
                rank,
                f"rank{rank}.log line {hit.line}: {hit.signature.cause}: " + (hit.text[:160]),
            )


def _ranks(ranks: list[int]) -> str:
    return ", ".join(str(r) for r in ranks[:8]) + (" …" if len(ranks) > 8 else "")


def _first_error(path: Path) -> Hit | None:
    """The first line of a rank log that `noderun explain` counts as an error (not a warning):
    a cause or its consequence, or a launcher's or scheduler's report that the run failed (a
    step cancelled without a reason is only a weak hint of why, but it did end the run)."""
    try:
        return next(
            (
                h
                for h in _scanner().scan(path)
                if h.signature.tier in (Tier.ROOT, Tier.CONSEQUENCE) or h.signature.run_failed
            ),
            None,
        )
    except OSError:
        return None


@functools.cache
def _scanner() -> Scanner:
    return Scanner()


def check_attempts(ev: RunEvidence, _: Expectations) -> Check:
    """Every attempt of a restarted or continued run, and how it ended."""
    record = ev.run_record or {}
    lines = rundir.attempt_lines(record)
    if not lines:
        return passed("attempts", "one attempt")
    detail = f"{len(lines)} attempts: " + "; ".join(line.split(": ", 1)[1] for line in lines)
    earlier = record.get("attempts") or []
    if all(a.get("status") in ("preempted", "interrupted") for a in earlier):
        return passed("attempts", detail)  # stopped from outside, continued: nothing went wrong
    return warned("attempts", detail, "earlier attempts failed: see `noderun explain` for why")


# name -> check, in report order; the names are what --skip and --require take
RUN_DIR_CHECKS: dict[str, CheckFn] = {
    "run-json": check_run_json,
    "run-status": check_run_status,
    "attempts": check_attempts,
    **GROUP_CHECKS,
    "metrics": check_metrics_file,
    "epochs": check_epochs,
    "losses": check_losses,
    "checkpoint": check_checkpoint,
    "rank-logs": check_rank_logs,
}
