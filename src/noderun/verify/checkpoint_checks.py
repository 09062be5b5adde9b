"""Does the final checkpoint load? noderun's (checkpoints/<tag>/, ``.complete`` marker), or
whatever model files the script itself wrote under the run directory (``torch.save``,
Lightning's ``.ckpt``), loaded with ``weights_only=True``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from noderun import rundir, timeline
from noderun.errors import NoderunError
from noderun.runtime import checkpoint
from noderun.runtime.checkpoint import CHECKPOINTER_READY
from noderun.runtime.loading import load
from noderun.verify.evidence import RunEvidence, load_json, number
from noderun.verify.model import Check, Expectations, failed, passed, skipped, warned

MODEL_SUFFIXES = (".pt", ".pth", ".ckpt", ".bin")
# where a model's weights sit in what torch.save / Lightning wrote
MODEL_KEYS = ("model", "state_dict", "model_state_dict")


def _tensors(state: Any) -> Iterator[Any]:
    import torch  # only once a checkpoint is found: verify of a run without one needs no torch

    if isinstance(state, torch.Tensor):
        yield state
    elif isinstance(state, dict):
        for value in state.values():
            yield from _tensors(value)


def _judge(name: str, model: Any) -> Check | None:
    """FAIL when the model state is empty or not finite; None when it is fine."""
    if not isinstance(model, dict) or not model:
        return failed("checkpoint", f"{name} holds no model state")
    bad = sum(1 for t in _tensors(model) if t.is_floating_point() and not t.isfinite().all())
    if bad:
        return failed("checkpoint", f"{name}: {bad} model tensors hold NaN/inf")
    return None


def _summary(name: str, model: dict[str, Any]) -> str:
    tensors = list(_tensors(model))
    return f"{name} loads: {len(tensors)} tensors, {sum(t.numel() for t in tensors)} values"


def script_checkpoints(run_dir: Path) -> list[Path]:
    """Model files the script wrote under the run directory, newest last (not noderun's)."""
    ours = run_dir / rundir.CHECKPOINTS
    found = [
        p
        for p in run_dir.rglob("*")
        if p.suffix in MODEL_SUFFIXES and p.is_file() and not _inside_noderun_checkpoint(p, ours)
    ]
    return sorted(found, key=lambda p: p.stat().st_mtime)


def _inside_noderun_checkpoint(path: Path, ours: Path) -> bool:
    return path.parent.parent == ours and (path.parent / checkpoint.META_FILE).exists()


def check_checkpoint(ev: RunEvidence, _: Expectations) -> Check:
    directory = ev.run_dir / rundir.CHECKPOINTS
    final = checkpoint.latest(directory)
    if final is None:
        partial = [p.name for p in directory.iterdir() if p.is_dir()] if directory.is_dir() else []
        if partial:
            why = f"only incomplete ones ({', '.join(partial)})"
            return failed("checkpoint", f"no complete checkpoint in checkpoints/: {why}")
        started = any(r["stage"] == CHECKPOINTER_READY for r in timeline.gather(ev.run_dir))
        if started:
            return failed("checkpoint", "no complete checkpoint in checkpoints/: none written")
        if ev.noderun_runtime:  # a script that chose not to checkpoint (--require makes it FAIL)
            return skipped("checkpoint", "no checkpoints/ (the script saved none)")
        return _script_checkpoint(ev)
    try:
        state = load(final)
    except Exception as err:  # a broken file can raise anything from torch.load
        why = err.problem if isinstance(err, NoderunError) else f"{type(err).__name__}: {err}"
        return failed("checkpoint", f"{final.name} does not load: {why.splitlines()[0]}")
    model = state.get("model")
    if not isinstance(model, dict) or not model:
        return failed("checkpoint", f"{final.name} holds no model state (keys {sorted(state)})")
    problem = _judge(final.name, model)
    if problem:
        return problem
    detail = _summary(final.name, model)
    meta = load_json(final / checkpoint.META_FILE)
    epoch = meta.data.get("epoch") if meta.ok else None
    last_epoch = number(ev.rows[-1].get("epoch")) if ev.rows else None
    if isinstance(epoch, int) and last_epoch is not None and epoch != last_epoch:
        return warned(
            "checkpoint", f"{detail}; it is epoch {epoch}, metrics end at {int(last_epoch)}"
        )
    return passed("checkpoint", detail)


def _script_checkpoint(ev: RunEvidence) -> Check:
    """The newest model file the script wrote itself; SKIP when it wrote none."""
    files = script_checkpoints(ev.run_dir)
    if not files:
        return skipped(
            "checkpoint",
            "no checkpoint under the run directory (noderun's checkpoints/ or the script's "
            f"own {', '.join(MODEL_SUFFIXES)} files)",
        )
    newest = files[-1]
    name = str(newest.relative_to(ev.run_dir))
    import torch

    try:
        state = torch.load(newest, map_location="cpu", weights_only=True)
    except Exception as err:  # a broken file can raise anything from torch.load
        return failed("checkpoint", f"{name} does not load: {str(err).splitlines()[0][:200]}")
    model = next((state[k] for k in MODEL_KEYS if isinstance(state, dict) and k in state), state)
    problem = _judge(name, model)
    return problem or passed("checkpoint", _summary(name, model) + " (written by the script)")
