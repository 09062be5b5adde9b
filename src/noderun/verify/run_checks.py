"""Checks of a run directory: run.json, runtime.json, metrics.csv, checkpoint, rank logs."""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from noderun import rundir
from noderun.errors import NoderunError
from noderun.explain.scanner import Hit, Scanner
from noderun.explain.signatures import Tier
from noderun.runtime import checkpoint
from noderun.runtime.metrics import COLUMNS
from noderun.verify.evidence import RunEvidence, load_json, number
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
    if status == "completed" and code == 0:
        return passed("run-status", f"completed, exit code 0, {record.get('duration_sec', '?')} s")
    if status == "running" and "end_time" not in record:
        detail = "run.json says running and has no end time: still running, or the launcher died"
        return failed("run-status", detail, explain_hint(ev.run_dir))
    failure = record.get("failure") or {}
    why = failure.get("reason") or f"exit code {code}"
    if failure.get("rank") is not None:
        who = f"rank {failure['rank']} (node {failure.get('node_rank')})"
    elif failure.get("node_rank") is not None:
        who = f"node {failure['node_rank']}"
    else:
        who = "the job"
    if record.get("interrupted_by"):
        why = f"interrupted by {record['interrupted_by']}"
    return failed("run-status", f"run {status}: {who}: {why}", explain_hint(ev.run_dir))


def check_runtime_json(ev: RunEvidence, _: Expectations) -> Check:
    if not ev.runtime.ok:
        return failed(
            "runtime-json",
            f"{ev.runtime.error}: rank 0 never finished noderun.init()",
            "call ctx = noderun.init() at the start of the script",
        )
    record = ev.runtime_record
    world = record.get("world_size")
    if isinstance(world, int) and world > 1 and not record.get("process_group_initialized"):
        return failed("runtime-json", f"world of {world} but no process group was initialized")
    launcher = (record.get("topology") or {}).get("launcher", "?")
    return passed(
        "runtime-json",
        f"process group initialized ({launcher}, init {record.get('init_seconds', '?')} s)"
        if record.get("process_group_initialized")
        else "single process, no process group",
    )


def check_ddp_init(ev: RunEvidence, expect: Expectations) -> Check:
    """Every rank took part in the process group: each sent its host through it (gather)."""
    runtime = ev.runtime_record
    if not runtime:
        return failed("ddp-init", "no runtime.json: DDP initialization is not confirmed")
    world = runtime.get("world_size")
    hosts = runtime.get("rank_hosts") or []
    if isinstance(world, int) and world > 1 and not runtime.get("process_group_initialized"):
        return failed("ddp-init", f"world of {world} but the process group never initialized")
    if len(hosts) != world:
        return failed("ddp-init", f"{len(hosts)} of {world} ranks reported in through the group")
    distinct = sorted(set(hosts))
    nodes = _asked(ev, "nnodes", expect.nnodes)
    if ev.run_record.get("backend") == "slurm" and nodes and len(distinct) != nodes:
        return failed(
            "ddp-init",
            f"ranks ran on {len(distinct)} host(s) ({', '.join(distinct)}), {nodes} node(s) asked",
            "check the srun step spans every node of the allocation",
        )
    return passed(
        "ddp-init",
        f"all {world} ranks joined the {runtime.get('backend')} group on {', '.join(distinct)}",
    )


def _asked(ev: RunEvidence, key: str, explicit: int | None) -> int | None:
    if explicit is not None:
        return explicit
    value = (ev.run_record.get("topology") or {}).get(key)
    return value if isinstance(value, int) else None


def check_world_size(ev: RunEvidence, expect: Expectations) -> Check:
    asked = _asked(ev, "world_size", expect.world_size)
    asked_nodes = _asked(ev, "nnodes", expect.nnodes)
    runtime = ev.runtime_record
    if not runtime:
        return failed("world-size", "no runtime.json: the world size the ranks saw is unknown")
    world = runtime.get("world_size")
    hosts = runtime.get("rank_hosts") or []
    nodes = (runtime.get("topology") or {}).get("nnodes")
    if asked is None:
        return warned("world-size", f"{world} ranks; nothing recorded to compare with")
    if world != asked:
        return failed(
            "world-size",
            f"ranks saw world size {world}, {asked} was asked",
            "check --nnodes/--nproc-per-node and that every node started",
        )
    if hosts and len(hosts) != world:
        return failed("world-size", f"{len(hosts)} ranks reported a host, world size is {world}")
    if asked_nodes is not None and nodes is not None and nodes != asked_nodes:
        return failed("world-size", f"ranks saw {nodes} nodes, {asked_nodes} were asked")
    return passed("world-size", f"{world} ranks on {nodes or '?'} node(s), as asked")


def check_backend(ev: RunEvidence, expect: Expectations) -> Check:
    runtime = ev.runtime_record
    if not runtime:
        return failed("backend", "no runtime.json: the backend is unknown")
    backend, device = runtime.get("backend"), str(runtime.get("device", ""))
    asked = expect.backend or ev.run_record.get("requested_backend")
    if asked and backend != asked:
        return failed("backend", f"backend {backend}, {asked} was asked", "set NODERUN_BACKEND")
    if backend == "nccl" and not device.startswith("cuda"):
        return failed("backend", f"nccl on device {device}", "nccl needs CUDA; use gloo on CPU")
    if backend == "gloo" and device.startswith("cuda"):
        return warned("backend", f"gloo on {device}: works, but slow", "use nccl with CUDA")
    return passed("backend", f"{backend} on {device}")


def check_metrics_file(ev: RunEvidence, _: Expectations) -> Check:
    if not ev.metrics.ok:
        return failed("metrics", ev.metrics.error, "log epochs with noderun.runtime.metrics")
    missing = [c for c in ("epoch", "train_loss") if c not in ev.metrics_header]
    if missing:
        return failed("metrics", f"metrics.csv has no {', '.join(missing)} column")
    if not ev.rows:
        return failed("metrics", "metrics.csv has a header but no epoch rows")
    absent = [c for c in COLUMNS if c not in ev.metrics_header]
    detail = f"{len(ev.rows)} rows, {len(ev.metrics_header)} columns"
    if absent:
        return warned("metrics", f"{detail}; without {', '.join(absent)}")
    return passed("metrics", detail)


def check_epochs(ev: RunEvidence, expect: Expectations) -> Check:
    if not ev.rows or "epoch" not in ev.metrics_header:
        return skipped("epochs", "no metrics rows")
    previous: float | None = None
    for line, row in enumerate(ev.rows, start=2):
        epoch = number(row.get("epoch"))
        if epoch is None or not math.isfinite(epoch) or epoch != int(epoch):
            return failed("epochs", f"metrics.csv line {line}: epoch {row.get('epoch')!r}")
        if previous is not None and epoch <= previous:
            return failed(
                "epochs",
                f"metrics.csv line {line}: epoch {int(epoch)} after {int(previous)} "
                "(not increasing: a resumed run logging again, or two writers?)",
                "log metrics on rank 0 only, once per epoch",
            )
        previous = epoch
    count = len(ev.rows)
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
            if value is None and column == "train_loss":
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


def _tensors(state: Any) -> Iterator[Any]:
    if isinstance(state, torch.Tensor):
        yield state
    elif isinstance(state, dict):
        for value in state.values():
            yield from _tensors(value)


def check_checkpoint(ev: RunEvidence, _: Expectations) -> Check:
    directory = ev.run_dir / rundir.CHECKPOINTS
    final = checkpoint.latest(directory)
    if final is None:
        partial = [p.name for p in directory.iterdir() if p.is_dir()] if directory.is_dir() else []
        why = f"only incomplete ones ({', '.join(partial)})" if partial else "none written"
        return failed("checkpoint", f"no complete checkpoint in checkpoints/: {why}")
    try:
        state = checkpoint.load(final)
    except Exception as err:  # a broken file can raise anything from torch.load
        why = err.problem if isinstance(err, NoderunError) else f"{type(err).__name__}: {err}"
        return failed("checkpoint", f"{final.name} does not load: {why.splitlines()[0]}")
    model = state.get("model")
    if not isinstance(model, dict) or not model:
        return failed("checkpoint", f"{final.name} holds no model state (keys {sorted(state)})")
    tensors = list(_tensors(model))
    bad = sum(1 for t in tensors if t.is_floating_point() and not t.isfinite().all())
    if bad:
        return failed("checkpoint", f"{final.name}: {bad} model tensors hold NaN/inf")
    detail = f"{final.name} loads: {len(tensors)} tensors, {sum(t.numel() for t in tensors)} values"
    meta = _meta(final)
    last_epoch = number(ev.rows[-1].get("epoch")) if ev.rows else None
    if (
        isinstance(meta.get("epoch"), int)
        and last_epoch is not None
        and meta["epoch"] != last_epoch
    ):
        return warned(
            "checkpoint", f"{detail}; it is epoch {meta['epoch']}, metrics end at {int(last_epoch)}"
        )
    return passed("checkpoint", detail)


def _meta(path: Path) -> dict[str, Any]:
    loaded = load_json(path / checkpoint.META_FILE)
    return loaded.data if loaded.ok else {}


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
    """The first line of a rank log that `noderun explain` counts as an error (not a warning)."""
    try:
        return next(
            (h for h in _scanner().scan(path) if h.signature.tier in (Tier.ROOT, Tier.CONSEQUENCE)),
            None,
        )
    except OSError:
        return None


@functools.cache
def _scanner() -> Scanner:
    return Scanner()


# name -> check, in report order; the names are what --skip takes
RUN_DIR_CHECKS: dict[str, CheckFn] = {
    "run-json": check_run_json,
    "run-status": check_run_status,
    "runtime-json": check_runtime_json,
    "ddp-init": check_ddp_init,
    "world-size": check_world_size,
    "backend": check_backend,
    "metrics": check_metrics_file,
    "epochs": check_epochs,
    "losses": check_losses,
    "checkpoint": check_checkpoint,
    "rank-logs": check_rank_logs,
}
