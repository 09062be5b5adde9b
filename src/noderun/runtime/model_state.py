"""What a model's state looks like, for the checkpoint modules: unwrapping DDP, telling a
sharded (DTensor) model apart, checking a checkpoint fits a model, per-rank state. A leaf: it
imports no other runtime module, so checkpoint, sharded and training_state all point down here.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from noderun.errors import UsageError


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The user's module inside DDP (``.module``); FSDP2 modules are their own."""
    inner = getattr(model, "module", model)
    return inner if isinstance(inner, torch.nn.Module) else model


def is_sharded(model: torch.nn.Module) -> bool:
    """True when any parameter is a DTensor (FSDP2 ``fully_shard``, tensor parallel). No
    DTensor exists before ``torch.distributed.tensor`` is imported (~0.5 s), so not before."""
    if "torch.distributed.tensor" not in sys.modules:
        return False
    from torch.distributed.tensor import DTensor

    return any(isinstance(p, DTensor) for p in model.parameters())


def check_shapes(source: Path, saved: Mapping[str, Any], model: torch.nn.Module) -> None:
    """Refuse a checkpoint of another model: name the file and the first mismatch."""
    expected = {k: tuple(v.shape) for k, v in unwrap(model).state_dict().items()}
    found = {k: tuple(v) for k, v in saved.items()}
    missing = sorted(set(expected) - set(found))
    unexpected = sorted(set(found) - set(expected))
    hint = "resume with the model configuration that wrote it, or start without --resume"
    if missing or unexpected:
        parts = []
        if missing:
            parts.append(f"missing {', '.join(missing[:3])}{' …' if len(missing) > 3 else ''}")
        if unexpected:
            parts.append(
                f"unexpected {', '.join(unexpected[:3])}{' …' if len(unexpected) > 3 else ''}"
            )
        raise UsageError(f"checkpoint {source} does not fit this model ({'; '.join(parts)})", hint)
    for key, shape in expected.items():
        if found[key] != shape:
            raise UsageError(
                f"checkpoint {source} does not fit this model: {key} is "
                f"{list(found[key])} in the checkpoint but {list(shape)} in the model",
                hint,
            )


def per_rank_state(gathered: list[tuple[dict[str, Any], dict[str, Any]]]) -> dict[str, Any]:
    """``[(rng, extra), ...]`` in rank order -> ``{"rng": [...], "extra": [...]}``."""
    return {"rng": [state for state, _ in gathered], "extra": [own for _, own in gathered]}
