"""A FLARE site trained by every rank of a noderun job; only global rank 0 talks to FLARE.

    with noderun.init() as ctx, FederatedSite(ctx) as site:
        model = ctx.prepare(Net())
        for fl_round in site.rounds(model):     # the global model is in `model` on every rank
            ...train...
            site.send(model, metrics={"accuracy": acc}, steps=n)   # averaged over ranks

Each round has FLARE's task kind, the same on every rank: ``train`` (train, send weights and
metrics), ``validate`` (evaluate the received model, ``site.send`` sends the metrics and no
weights) or ``submit_model`` (``site.send`` sends this site's model, no training):

        for fl_round in site.rounds(model):
            if fl_round.is_validate:
                site.send(model, metrics={"accuracy": evaluate(model)})
                continue
            if fl_round.is_train:
                ...train...
            site.send(model, metrics=..., steps=n)

Rank 0 waits for FLARE's next task in a thread while the other ranks wait in a broadcast that
is renewed every ``heartbeat`` seconds, so slow peer sites never trip the collective timeout.
The decision (next round, stop, or rank 0's FLARE error) reaches every rank by broadcast; the
weights by one broadcast per dtype.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import queue
import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any

import torch
import torch.distributed as dist

from noderun.errors import NoderunError
from noderun.runtime.context import Context

DEFAULT_HEARTBEAT = 20.0  # seconds the other ranks wait in one broadcast while rank 0 waits
HEARTBEAT_ENV = "NODERUN_FLARE_HEARTBEAT"
# nvflare.client.cell.bootstrap.BOOTSTRAP_FILE_ENV_VAR: set by FLARE for the process it launches
FLARE_BOOTSTRAP_ENV = "NVFLARE_CLIENT_API_BOOTSTRAP"
TIMINGS_FILE = "flare_rounds.json"
# FLARE's task kinds as nvflare.client reports them (is_train, is_evaluate, is_submit_model)
TRAIN, VALIDATE, SUBMIT_MODEL = "train", "validate", "submit_model"


@dataclasses.dataclass(frozen=True)
class Round:
    """One FL round as every rank sees it."""

    number: int
    total: int
    site: str
    job_id: str
    kind: str = TRAIN  # TRAIN, VALIDATE or SUBMIT_MODEL, decided by rank 0 for every rank
    task: str = ""  # FLARE's task name (e.g. "train", "validate", "submit_model")

    @property
    def is_train(self) -> bool:
        return self.kind == TRAIN

    @property
    def is_validate(self) -> bool:
        return self.kind == VALIDATE

    @property
    def is_submit_model(self) -> bool:
        return self.kind == SUBMIT_MODEL


class FlareSessionError(NoderunError):
    """Rank 0's FLARE session failed; every rank of the site stops with the same line."""


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The module inside DDP/compile wrappers: its state-dict keys are FLARE's keys."""
    inner = getattr(model, "module", None)
    return inner if isinstance(inner, torch.nn.Module) else model


def broadcast_state(module: torch.nn.Module, src: int = 0) -> None:
    """Copy ``module``'s state from rank ``src`` to every rank: one broadcast per dtype."""
    by_dtype: dict[tuple[torch.dtype, torch.device], list[torch.Tensor]] = {}
    for tensor in module.state_dict().values():
        by_dtype.setdefault((tensor.dtype, tensor.device), []).append(tensor)
    for tensors in by_dtype.values():
        flat = torch.cat([t.detach().reshape(-1) for t in tensors])
        dist.broadcast(flat, src=src)
        offset = 0
        with torch.no_grad():
            for t in tensors:
                t.copy_(flat[offset : offset + t.numel()].view_as(t))
                offset += t.numel()


def task_kind(flare: Any) -> str:
    """The kind of the task rank 0 just received, from FLARE's client API (rank 0 only)."""
    if flare.is_evaluate():
        return VALIDATE
    if flare.is_submit_model():
        return SUBMIT_MODEL
    return TRAIN  # is_train(), and a task of another name: trained, as before kinds existed


class FederatedSite:
    """The FLARE client API for a whole noderun job: rank 0 talks, every rank trains."""

    def __init__(self, ctx: Context, heartbeat: float | None = None):
        if not os.environ.get(FLARE_BOOTSTRAP_ENV):
            raise NoderunError(
                "this script was not started by a FLARE client (no FLARE session to join)",
                "run it as a site of noderun.flare.FedAvgJob (job.simulate(), job.poc(), or the "
                "exported job folder)",
            )
        self.ctx = ctx
        self.heartbeat = heartbeat or float(os.environ.get(HEARTBEAT_ENV) or DEFAULT_HEARTBEAT)
        self._heartbeats = 0
        # per round: wait_s (rank 0 waiting for FLARE's task), broadcast_s (weights to every
        # rank), train_s (the script's own work), send_s (reduce_s: metrics over ranks, then the
        # result to FLARE)
        self.timings: list[dict[str, float]] = []
        self.round: Round | None = None
        self._timing: dict[str, float] = {}
        self._trained_from = 0.0
        self._received: Any = None
        self._flare: Any = None
        self._sent = True
        self._waiter: threading.Thread | None = None
        self._tasks: queue.Queue[tuple[str, Any]] = queue.Queue()
        self.init_seconds = 0.0
        self.created_at = time.time()
        if ctx.is_main:
            started = time.perf_counter()
            from nvflare import client as flare

            flare.init(rank="0")
            self._flare = flare
            self.init_seconds = time.perf_counter() - started

    def rounds(self, model: torch.nn.Module) -> Iterator[Round]:
        """Each FLARE task as a Round, the global weights already loaded into ``model``
        (train, validate: the model to evaluate; submit_model brings none: ``model`` keeps
        this site's weights)."""
        while True:
            started = time.perf_counter()
            kind, payload = self._next_decision()
            waited = time.perf_counter() - started
            if kind == "stop":
                return
            if kind == "error":
                raise FlareSessionError(
                    f"rank 0's FLARE session failed: {payload}", "see rank 0's log"
                )
            started = time.perf_counter()
            self.round = Round(**payload)
            if self.round.kind != SUBMIT_MODEL:
                if self.ctx.is_main:
                    params = {k: torch.as_tensor(v) for k, v in self._received.params.items()}
                    unwrap(model).load_state_dict(params, strict=True)
                if self.ctx.distributed:
                    broadcast_state(unwrap(model))
            self._timing = {"round": self.round.number, "task_at": time.time(), "wait_s": waited}
            self._timing["heartbeats"], self._heartbeats = self._heartbeats, 0
            self._timing["broadcast_s"] = time.perf_counter() - started
            self._sent = False
            self._trained_from = time.perf_counter()
            yield self.round
            if not self._sent:
                raise NoderunError(
                    f"round {self.round.number} ended without site.send(...)",
                    "call site.send(model, metrics=..., steps=...) once per round",
                )

    def send(
        self,
        model: torch.nn.Module,
        metrics: Mapping[str, float] | None = None,
        steps: int | None = None,
    ) -> dict[str, float]:
        """Average ``metrics`` over ranks; rank 0 sends them to FLARE with the weights (a
        train round), without weights (validate), or the weights alone (submit_model)."""
        started = time.perf_counter()
        self._timing["train_s"] = started - self._trained_from
        averaged = self.ctx.all_reduce_mean(dict(metrics or {}))
        self._timing["reduce_s"] = time.perf_counter() - started
        if self.ctx.is_main:
            from nvflare.apis.fl_constant import FLMetaKey
            from nvflare.app_common.abstract.fl_model import FLModel

            kind = self.round.kind if self.round is not None else TRAIN
            if kind == VALIDATE:
                result = FLModel(metrics=averaged)
            else:
                params = {k: v.detach().cpu() for k, v in unwrap(model).state_dict().items()}
                meta = {} if steps is None else {FLMetaKey.NUM_STEPS_CURRENT_ROUND: steps}
                metrics_sent = averaged if kind == TRAIN else None
                result = FLModel(params=params, metrics=metrics_sent, meta=meta)
            self._flare.send(result)
        self._sent = True
        self._timing["send_s"] = time.perf_counter() - started
        self.timings.append(self._timing)
        return averaged

    def _next_decision(self) -> tuple[str, Any]:
        """Rank 0: wait for FLARE, renewing the others' wait; everyone: the decision."""
        while True:
            decision: tuple[str, Any] = ("wait", None)
            if self.ctx.is_main:
                decision = self._poll_flare()
            decision = self.ctx.broadcast_object(decision)
            if decision[0] != "wait":
                return decision
            self._heartbeats += 1

    def _poll_flare(self) -> tuple[str, Any]:
        if self._waiter is None:
            self._waiter = threading.Thread(target=self._receive, daemon=True)
            self._waiter.start()
        try:
            kind, value = self._tasks.get(timeout=self.heartbeat)
        except queue.Empty:
            return ("wait", None)
        self._waiter = None
        if kind != "task":
            return (kind, value)
        self._received = value
        flare = self._flare
        return (
            "task",
            {
                "number": int(value.current_round or 0),
                "total": int(value.total_rounds or 0),
                "site": str(flare.get_site_name()),
                "job_id": str(flare.get_job_id()),
                "kind": task_kind(flare),
                "task": str(flare.get_task_name()),
            },
        )

    def _receive(self) -> None:
        try:
            received = self._flare.receive()
        except Exception as err:  # FLARE aborted the session: every rank must hear it
            self._tasks.put(("error", f"{type(err).__name__}: {err}"))
            return
        self._tasks.put(("stop", None) if received is None else ("task", received))

    def close(self) -> None:
        """Rank 0 ends its FLARE session and records the round timings in the run dir."""
        if not self.ctx.is_main:
            return
        with contextlib.suppress(Exception):
            self._flare.shutdown()
        with contextlib.suppress(OSError):
            self.ctx.run_dir.mkdir(parents=True, exist_ok=True)
            record = {
                "created_at": self.created_at,
                "init_s": self.init_seconds,
                "rounds": self.timings,
            }
            (self.ctx.run_dir / TIMINGS_FILE).write_text(json.dumps(record, indent=2) + "\n")

    def __enter__(self) -> FederatedSite:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
