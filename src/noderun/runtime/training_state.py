"""Save and resume the whole training state, on every rank, so a resumed run is bit-identical.

    ckpt = Checkpointer(ctx, model, optimizer, scheduler, keep=3)
    start = ckpt.resume(args.resume)            # None / "auto" / a path
    for epoch in range(start.epoch + 1, args.epochs + 1):
        ctx.set_epoch(train, epoch)
        for step, batch in ckpt.steps(train, epoch):   # skips what the checkpoint already did
            ...
        ckpt.save(Position(epoch=epoch, global_step=global_step))

DDP (or single-process) state is written by rank 0 as one ``state.pt``; FSDP2/DTensor state
goes through torch.distributed.checkpoint, every rank writing its shard. RNG states of all
ranks are saved, each rank restores its own.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import math
import os
import shutil
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TypeVar

import torch

from noderun import disk_room
from noderun.errors import UsageError
from noderun.runtime import checkpoint, heartbeat, profiling, rng, write_errors
from noderun.runtime.context import Context
from noderun.runtime.model_state import check_shapes, is_sharded, per_rank_state, unwrap
from noderun.runtime.rank_states import RankStateGather

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class Position:
    """Where training stands: ``epoch`` epochs done, then ``step`` batches of the next one."""

    epoch: int = 0
    step: int = 0
    global_step: int = 0

    @property
    def tag(self) -> str:
        """``epoch-0003`` after an epoch, ``epoch-0003-step-000017`` inside epoch 4; names sort.
        Step-based training (``Position(global_step=n)``, no epochs) is ``step-00000020``: the
        loop keeps its own data position (e.g. samples seen, in ``extra``), so such a
        checkpoint resumes on any world size."""
        if not self.epoch and not self.step and self.global_step:
            return f"step-{self.global_step:08d}"
        base = f"epoch-{self.epoch:04d}"
        return f"{base}-step-{self.step:06d}" if self.step else base


def _owned(tree: Any) -> Any:
    """``tree`` with every tensor cloned (out of a memory-mapped file into this process)."""
    if isinstance(tree, torch.Tensor):
        return tree.clone()
    if isinstance(tree, dict):
        return {k: _owned(v) for k, v in tree.items()}
    if isinstance(tree, list | tuple):
        return type(tree)(_owned(v) for v in tree)
    return tree


class Checkpointer:
    """Rank-aware saving and resuming of model, optimizer, scheduler, position and RNG states."""

    def __init__(
        self,
        ctx: Context,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer | None = None,
        scheduler: Any = None,
        *,
        keep: int = 3,
        directory: Path | None = None,
        min_commit_sec: float = 0.0,
        on_write_error: str | None = None,
    ) -> None:
        self.ctx = ctx
        self.model = model
        self.optimizer = optimizer
        self.scheduler = scheduler
        self.keep = keep
        self.directory = directory or ctx.run_dir / checkpoint.CHECKPOINTS_DIR
        self.sharded = is_sharded(model)
        self.resumed_from: Path | None = None
        self.extra: dict[str, Any] = {}  # this rank's ``extra`` of the resumed checkpoint
        self._skip: tuple[int, int] | None = None  # (epoch, batches) to skip after resume
        self._pending_rng: dict[str, Any] | None = None
        self._worker = checkpoint.CommitWorker()
        self._gather = RankStateGather(ctx)
        # a full checkpoint taken sooner than this after the last commit waits here, newest wins
        self.min_commit_sec = min_commit_sec
        self._last_commit = -math.inf
        # the paced commit still waiting for its turn: (future, its gather, the turn before)
        self._waiting: tuple[Future[Path], Callable[[], object], float] | None = None
        self.on_write_error = write_errors.policy() if on_write_error is None else on_write_error
        if ctx.is_main:  # verify then expects a complete checkpoint at the end
            checkpoint.announce(self.directory)
        atexit.register(self._wait_at_exit)  # before init()'s shutdown: atexit is LIFO
        if ctx.is_main and (short := disk_room.shortfall(ctx.run_dir, self._estimate())):
            write_errors.say(write_errors.WriteError(short), "warn")

    def _estimate(self) -> int:
        """About one checkpoint's bytes: the weights, and twice them again for an optimizer's
        moments (Adam's; SGD's momentum needs less)."""
        weights = sum(t.numel() * t.element_size() for t in self.model.state_dict().values()
                      if isinstance(t, torch.Tensor))  # fmt: skip
        return weights * (3 if self.optimizer is not None else 1)

    def save(
        self, position: Position, extra: Mapping[str, Any] | None = None, wait: bool = False
    ) -> Path:
        """Checkpoint the current state; call on every rank at the same point.

        The state is serialized before this returns (sharded: every shard written and
        fsynced); rank 0's fsync, rename and ``.complete`` marker finish in the background
        unless ``wait`` (use it before exiting, e.g. on preemption). A full checkpoint's
        commit queues behind the previous one (commits stay in order, at most two in flight);
        otherwise, and before a resume, the previous commit is waited for first. With
        ``min_commit_sec``, a full checkpoint taken within that time of the last commit waits
        for its turn and is dropped if a newer one comes first: the returned path may then
        never exist; ``wait`` (and ``wait()``, close, exit) commits the newest at once.
        """
        with profiling.phase("checkpoint"):
            return self._save(position, extra, wait)

    def _save(self, position: Position, extra: Mapping[str, Any] | None, wait: bool) -> Path:
        self._raise_failed()
        if self.sharded:
            self.wait()
        self._gather.wait_sent()
        collect = self._gather.start((rng.capture(), dict(extra or {})))  # rank 0 gets it later
        trainer: dict[str, Any] = {
            "position": dataclasses.asdict(position),
            "world_size": self.ctx.world_size,
        }
        if self.scheduler is not None:
            trainer["scheduler"] = self.scheduler.state_dict()
        meta = {
            "epoch": position.epoch,
            "step_in_epoch": position.step,
            "global_step": position.global_step,
            "world_size": self.ctx.world_size,
        }
        final = self.directory / position.tag
        try:
            if self.sharded:
                from noderun.runtime import sharded  # DCP: ~0.5 s of imports, only when used

                job = sharded.save(
                    self.ctx,
                    self.model,
                    self.optimizer,
                    trainer,
                    self.directory,
                    position.tag,
                    meta,
                    self.keep,
                    collect,
                )
                if job is not None:
                    self._submit(final, job)
            elif collect is not None:
                self._save_full(trainer, position.tag, meta, collect)
        except Exception as err:  # this rank could not write its part: said here and now
            self._failed(final, err)
        if wait:
            self.wait()
            self.ctx.barrier()  # no rank exits (the launcher would stop rank 0) before it is done
        return final

    def _save_full(
        self,
        trainer: dict[str, Any],
        tag: str,
        meta: Mapping[str, Any],
        collect: Callable[[], list[Any]],
    ) -> None:
        """Rank 0: take the state now; commit it in the background, or keep it until its turn
        when the last commit began less than ``min_commit_sec`` ago (a newer one replaces it)."""
        trainer["model"] = unwrap(self.model).state_dict()
        if self.optimizer is not None:
            trainer["optimizer"] = self.optimizer.state_dict()

        def write_ranks(tmp: Path) -> None:
            ranks = per_rank_state(collect())
            checkpoint.torch_save_durably(ranks, tmp / checkpoint.RANKS_FILE)

        small = checkpoint.small_on_cpu(trainer)
        if not small:
            self._drain()  # serialized here into .<tag>.tmp: no earlier commit may be running
        job = checkpoint.take_full(trainer, self.directory, tag, self.keep, meta, write_ranks)
        now = time.monotonic()
        waiting = self._waiting
        if waiting is not None and self._worker.cancel(waiting[0]):  # not started: this is newer
            waiting[1]()  # the gather it would have collected still completes
            self._last_commit = waiting[2]
        self._waiting = None
        turn = self._last_commit + self.min_commit_sec
        if small and now < turn:  # decided here; the worker only keeps the time
            future = self._worker.submit(self.directory / tag, self._loud(tag, job), turn)
            self._waiting = (future, collect, self._last_commit)
            self._last_commit = turn
        else:
            self._submit(self.directory / tag, job)

    def _submit(self, path: Path, job: Callable[[], Path]) -> None:
        self._last_commit = time.monotonic()
        self._worker.submit(path, self._loud(path.name, job))

    def _loud(self, tag: str, job: Callable[[], Path]) -> Callable[[], Path]:
        """``job`` that, when it fails in the background, says so at once (the training thread
        raises it at its next save or wait)."""
        path = self.directory / tag

        def run() -> Path:
            try:
                return job()
            except Exception as err:
                error = write_errors.write_error("checkpoint", path, err, self.ctx.rank)
                write_errors.say(error, self.on_write_error)
                raise error from None

        return run

    def _drain(self) -> None:
        """Commit a waiting one now; wait for every commit; say each that failed."""
        self._waiting = None
        self._said(self._worker.drain())

    def _failed(self, path: Path, err: BaseException) -> None:
        """A checkpoint this rank could not write: said on its console at once; training stops
        (WriteError) unless the policy is ``warn``. What is left of it is removed elsewhere."""
        if isinstance(err, write_errors.WriteError):
            error = err  # said by the worker as it happened
        else:
            error = write_errors.write_error("checkpoint", path, err, self.ctx.rank)
            write_errors.say(error, self.on_write_error)
        if self.on_write_error == "stop":
            raise error from None

    def _raise_failed(self) -> None:
        """Background commits that failed since the last look: said, and (stop) raised."""
        self._said(self._worker.finished())

    def _said(self, commits: list[tuple[Path, Future[Path]]]) -> None:
        for path, future in commits:
            err = None if future.cancelled() else future.exception()
            if err is not None:
                self._failed(path, err)

    def wait(self) -> None:
        """Commit a waiting checkpoint now, block until every checkpoint is durable and marked
        complete (rank 0's work); a failed one raises WriteError (policy ``stop``)."""
        self._gather.wait_sent()
        self._drain()

    def _wait_at_exit(self) -> None:
        # a failed write was said already; a peer gone at exit (its gather) is not this rank's
        with contextlib.suppress(Exception):
            self.wait()

    def resume(self, spec: str | Path | None) -> Position:
        """Load ``spec`` (None: fresh start; ``auto``: newest in the run dir; a path) into the
        model, optimizer and scheduler; return where to continue. Bad input: UsageError."""
        self.wait()
        path = self._agree(lambda: checkpoint.resolve(spec, self.ctx.run_dir))
        if path is None:
            return Position()
        trainer, path = self._load_readable(spec, path)
        position = Position(**trainer["position"])
        saved_world = int(trainer.get("world_size", self.ctx.world_size))
        states = trainer["rng"]
        if saved_world != self.ctx.world_size and position.step:
            raise UsageError(
                f"checkpoint {path} was written by {saved_world} ranks in the middle of an epoch, "
                f"this run has {self.ctx.world_size}",
                f"resume with {saved_world} ranks, or from an end-of-epoch checkpoint",
            )
        if saved_world != self.ctx.world_size:
            self.ctx.print(
                f"noderun: {path} was written by {saved_world} ranks, this run has "
                f"{self.ctx.world_size}: weights and optimizer carry over, the data order and "
                "random streams differ from an uninterrupted run"
            )
        mine = self.ctx.rank if self.ctx.rank < len(states) else 0
        own = states[mine]
        if position.step:
            self._skip = (position.epoch + 1, position.step)
            self._pending_rng = own  # restored after the skipped batches were drawn
        else:
            rng.restore(own)
        extras = trainer.get("extra") or [{}]
        self.extra = dict(extras[mine] if mine < len(extras) else extras[0])
        self.resumed_from = path
        self._carry_over(path)
        self.ctx.print(
            f"noderun: resumed from {path} (epoch {position.epoch} done, "
            f"step {position.step} of the next, global step {position.global_step})"
        )
        return position

    def _load_readable(self, spec: str | Path | None, path: Path) -> tuple[dict[str, Any], Path]:
        """``path`` loaded on every rank; under ``auto`` a newest checkpoint that is marked
        complete but cannot be read (a truncated file) gives way, in one line, to the complete
        one before it. Never loads garbage: every file is checked as it is read."""
        while True:
            try:
                return self._agree(lambda p=path: self._load(p)), path  # type: ignore[misc]
            except UsageError as err:
                earlier = [p for p in checkpoint.checkpoints(path.parent) if p.name < path.name]
                if str(spec) != "auto" or not earlier or not checkpoint.is_unreadable(err):
                    raise
                self.ctx.print(
                    f"noderun: {err.problem}: resuming from the previous complete checkpoint "
                    f"{earlier[-1]}"
                )
                path = earlier[-1]

    def _carry_over(self, path: Path) -> None:
        """A checkpoint of another run becomes this run's first one (hard links where the
        filesystem allows): a run resumed from a finished one has nothing left to train, and
        must still end with a checkpoint that verify can load."""
        target = self.directory / path.name
        if path.resolve().parent == self.directory.resolve():
            return  # this run's own: nothing to copy, nothing for the other ranks to wait for
        if self.ctx.is_main and not target.exists():
            self.directory.mkdir(parents=True, exist_ok=True)
            tmp = checkpoint.temporary_dir(self.directory, path.name)
            shutil.rmtree(tmp, ignore_errors=True)
            try:
                shutil.copytree(path, tmp, copy_function=os.link)
            except OSError:  # another filesystem: copy the bytes
                shutil.rmtree(tmp, ignore_errors=True)
                shutil.copytree(path, tmp)
            tmp.rename(target)
        self.ctx.barrier()

    def steps(self, batches: Iterable[T], epoch: int) -> Iterator[tuple[int, T]]:
        """``(step, batch)`` of ``epoch``, steps counted from 1, resumed batches skipped."""
        iterator = iter(batches)
        first = 1
        if self._skip is not None and self._skip[0] == epoch:
            for _ in range(self._skip[1]):
                next(iterator)
            first = self._skip[1] + 1
            self._skip = None
        if self._pending_rng is not None:
            rng.restore(self._pending_rng)
            self._pending_rng = None
        for item in enumerate(profiling.profile_batches(iterator), start=first):
            heartbeat.beat()  # the stall watcher's step counter
            yield item

    def _load(self, path: Path) -> dict[str, Any]:
        """Read ``path`` into the live objects; return the trainer part (position, rng, extra)."""
        meta = checkpoint.read_meta(path)
        if self.sharded != (meta["format"] == "sharded"):
            raise UsageError(
                f"checkpoint {path} is {meta['format']}, this model is "
                f"{'sharded' if self.sharded else 'not sharded'}",
                "resume with the same parallelism (DDP vs FSDP) that wrote it",
            )
        if self.sharded:
            from noderun.runtime import sharded

            trainer = sharded.load_into(path, self.model, self.optimizer)
        else:
            trainer = checkpoint.read_full(path, mmap=True)  # copied into the model at once
            model_state = trainer.get("model")
            if not isinstance(model_state, dict):
                raise UsageError(f"checkpoint {path / checkpoint.STATE_FILE} holds no model", "")
            check_shapes(
                path / checkpoint.STATE_FILE,
                {k: v.shape for k, v in model_state.items()},
                self.model,
            )
            unwrap(self.model).load_state_dict(model_state)  # copies out of the mapping
            # the optimizer and scheduler keep the tensors they are given: own them, so no
            # mapping of the file outlives the resume (pruning it later must work, on NFS too)
            for part in ("optimizer", "scheduler"):
                if part in trainer:
                    trainer[part] = _owned(trainer[part])
            if self.optimizer is not None:
                self._load_part(path, "optimizer", self.optimizer, trainer)
        if self.scheduler is not None:
            self._load_part(path, "scheduler", self.scheduler, trainer)
        if "position" not in trainer or "rng" not in trainer:
            raise UsageError(f"checkpoint {path} holds weights but no training position", "")
        return trainer

    @staticmethod
    def _load_part(path: Path, name: str, target: Any, trainer: Mapping[str, Any]) -> None:
        if name not in trainer:
            raise UsageError(f"checkpoint {path} holds no {name} state", f"resume without a {name}")
        try:
            target.load_state_dict(trainer[name])
        except (ValueError, KeyError, RuntimeError) as err:
            raise UsageError(
                f"checkpoint {path}: its {name} state does not fit ({str(err).splitlines()[0]})",
                f"resume with the same {name} configuration",
            ) from None

    def _agree(self, action: Callable[[], T]) -> T:
        """Run ``action`` on every rank; if it fails on any, raise the same error on all."""
        error: UsageError | None = None
        result: T | None = None
        try:
            result = action()
        except UsageError as err:
            error = err
        if not self.ctx.all_reduce_sum(0.0 if error is None else 1.0):
            return result  # type: ignore[return-value]  # one small all_reduce when all is well
        errors = self.ctx.gather_object(None if error is None else (error.problem, error.hint))
        first = next((e for e in errors if e is not None), None)
        if first is not None:
            agreed = UsageError(*first)
            agreed.agreed = True  # type: ignore[attr-defined]  # every rank raises it: print once
            raise agreed
        return result  # type: ignore[return-value]
