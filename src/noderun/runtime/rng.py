"""Random number generator states (python, numpy, torch, CUDA) as ``weights_only``-loadable data."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch


def capture() -> dict[str, Any]:
    """This process's RNG states, made of tensors, ints, floats and tuples only."""
    kind, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)  # type: ignore[misc]
    version, internal, gauss = random.getstate()
    state: dict[str, Any] = {
        # the 625 words as one tensor: a tuple of ints costs weights_only loading ~5 ms
        "python": (version, torch.tensor(internal, dtype=torch.int64), gauss),
        "numpy": {
            "kind": str(kind),
            "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached),
        },
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore(state: dict[str, Any]) -> None:
    """Undo ``capture``: the next random number drawn is the one that would have come."""
    version, internal, gauss = state["python"]
    if isinstance(internal, torch.Tensor):
        internal = internal.tolist()
    random.setstate((version, tuple(internal), gauss))  # older checkpoints: a tuple of ints
    numpy_state = state["numpy"]
    np.random.set_state(
        (
            numpy_state["kind"],
            numpy_state["keys"].numpy().astype(np.uint32),
            numpy_state["pos"],
            numpy_state["has_gauss"],
            numpy_state["cached_gaussian"],
        )
    )
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
