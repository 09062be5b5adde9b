"""Sharded (FSDP2/DTensor) checkpoints through torch.distributed.checkpoint: every rank writes
its shard into ``shards/``; rank 0 adds ``trainer.pt`` (position, RNG, scheduler, optimizer
param groups) and commits the directory. Only tensors go to DCP, so nothing is unpickled."""

from __future__ import annotations

import shutil
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, cast

import torch
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.filesystem import FileSystemReader, FileSystemWriter
from torch.distributed.checkpoint.metadata import Metadata
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.checkpoint.state_dict_loader import _load_state_dict_from_keys
from torch.distributed.checkpoint.state_dict_loader import load as dcp_load
from torch.distributed.checkpoint.state_dict_saver import save as dcp_save

from noderun.errors import UsageError
from noderun.runtime import checkpoint
from noderun.runtime.context import Context
from noderun.runtime.model_state import check_shapes, per_rank_state


def _split(tree: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Nested dict -> (tensor leaves, other leaves), same nesting."""
    tensors: dict[str, Any] = {}
    others: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, Mapping):
            t, o = _split(value)
            tensors[key], others[key] = t, o
        elif isinstance(value, torch.Tensor):
            tensors[key] = value
        else:
            others[key] = value
    return tensors, others


def _merge(tensors: Mapping[str, Any], others: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(tensors)
    for key, value in others.items():
        if isinstance(value, Mapping):
            merged[key] = _merge(tensors.get(key, {}), value)
        else:
            merged[key] = value
    return merged


def save(
    ctx: Context,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer | None,
    trainer: dict[str, Any],
    directory: Path,
    tag: str,
    meta: Mapping[str, Any],
    keep: int,
    collect: Callable[[], list[Any]] | None,
) -> Callable[[], Path] | None:
    """Collective: every rank writes (and fsyncs) its shard; rank 0 then writes the rest and
    commits in the background (the call it returns, for a CommitWorker; None on other ranks)."""

    tmp = checkpoint.temporary_dir(directory, tag)
    if ctx.is_main:
        checkpoint.start(directory, tag)
    ctx.barrier()
    model_state, optim_state = get_state_dict(model, [optimizer] if optimizer else [])
    shards: dict[str, Any] = {"model": model_state}
    if optimizer is not None:
        tensors, others = _split(cast(Mapping[str, Any], optim_state["state"]))
        shards["optim"] = tensors
        trainer["optimizer_other"] = others
        trainer["optimizer_param_groups"] = optim_state["param_groups"]
    try:
        dcp_save(
            shards, storage_writer=FileSystemWriter(tmp / checkpoint.SHARDS_DIR, sync_files=True)
        )
    except CheckpointException as err:  # a BaseException: the caller's write-error handling
        raise _first_error(err) from None  # wants the OSError (a full disk) it wraps
    ctx.barrier()  # every shard is on disk before rank 0 commits
    if collect is None:  # not rank 0
        return None

    def durable_commit() -> Path:
        try:
            trainer.update(per_rank_state(collect()))
            checkpoint.torch_save_durably(trainer, tmp / checkpoint.TRAINER_FILE)
            return checkpoint.commit(tmp, directory, tag, {"format": "sharded", **meta}, keep)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)  # the room goes back; earlier ones stay
            raise

    return durable_commit


class _OnceReader(FileSystemReader):
    """A reader of a checkpoint's shards that reads DCP's metadata file only once (the shape
    check and the load both need it)."""

    _metadata: Metadata | None = None

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        if self._metadata is None:
            self._metadata = super().read_metadata(*args, **kwargs)
        return self._metadata


def _first_error(err: CheckpointException) -> BaseException:
    """DCP's error carries each rank's error and traceback: the first rank's says what it is."""
    return next(iter(err.failures.values()))[0] if err.failures else err


def _corrupt(path: Path, err: BaseException) -> UsageError:
    if isinstance(err, CheckpointException):
        err = _first_error(err)
    lines = str(err).strip().splitlines() or [""]
    detail = lines[0] if len(lines[0]) <= 160 else lines[0][:159] + "…"  # one line, not a page
    return UsageError(
        f"checkpoint {path / checkpoint.SHARDS_DIR} is corrupt ({type(err).__name__}: {detail})",
        "resume from an earlier checkpoint",
    )


def saved_shapes(path: Path, reader: FileSystemReader | None = None) -> dict[str, tuple[int, ...]]:
    """Global shapes of the model tensors in a sharded checkpoint, from DCP's metadata."""
    try:
        metadata = (reader or FileSystemReader(path / checkpoint.SHARDS_DIR)).read_metadata()
    except Exception as err:
        raise _corrupt(path, err) from None
    shapes = {}
    for key, item in metadata.state_dict_metadata.items():
        if key.startswith("model.") and hasattr(item, "size"):
            shapes[key.removeprefix("model.")] = tuple(item.size)
    return shapes


def load_into(
    path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None
) -> dict[str, Any]:
    """Collective: load each rank's shard into ``model``/``optimizer``; return ``trainer.pt``.
    ``trainer.pt`` (small) is read after the shards: a damaged one then fails on this rank
    only after every rank has left DCP's collectives (the caller agrees on the error).
    The read takes ~1 ms; a thread started per resume to overlap it with DCP cost as much
    or more (its start, join and GIL hand-offs, on a loaded 2-core machine)."""
    reader = _OnceReader(path / checkpoint.SHARDS_DIR)
    check_shapes(path / checkpoint.SHARDS_DIR, saved_shapes(path, reader), model)
    model_state, optim_state = get_state_dict(model, [optimizer] if optimizer else [])
    shards: dict[str, Any] = {"model": model_state}
    if optimizer is not None:
        shards["optim"], _ = _split(cast(Mapping[str, Any], optim_state["state"]))
    try:
        dcp_load(shards, storage_reader=reader)  # a damaged shard fails on every rank alike
    except CheckpointException as err:
        raise _corrupt(path, err) from None
    trainer = checkpoint.torch_load_checked(path / checkpoint.TRAINER_FILE)
    if optimizer is None:
        set_state_dict(model, [], model_state_dict=shards["model"], optim_state_dict={})
        return trainer
    optim_state = {
        "state": _merge(shards["optim"], trainer.get("optimizer_other", {})),
        "param_groups": trainer["optimizer_param_groups"],
    }
    set_state_dict(
        model, [optimizer], model_state_dict=shards["model"], optim_state_dict=optim_state
    )
    return trainer


def load_full(path: Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """A sharded checkpoint as one full state (no process group): ``model`` gathered."""

    trainer = checkpoint.torch_load_checked(path / checkpoint.TRAINER_FILE, map_location)
    try:
        with warnings.catch_warnings():  # "no process group: loading in one process" is the point
            warnings.simplefilter("ignore", UserWarning)
            shards = _load_state_dict_from_keys(checkpoint_id=str(path / checkpoint.SHARDS_DIR))
    except (Exception, CheckpointException) as err:  # DCP's own error is a BaseException
        raise _corrupt(path, err) from None
    state = dict(trainer)
    state["model"] = {k: v.to(map_location) for k, v in shards["model"].items()}
    if "optim" in shards:
        state["optimizer"] = {
            "state": _merge(shards["optim"], trainer.get("optimizer_other", {})),
            "param_groups": trainer.get("optimizer_param_groups", []),
        }
    return state
