"""Load any noderun checkpoint, full or sharded, into one state dict (no process group)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from noderun.runtime.checkpoint import PathLike, read_full, read_meta

if TYPE_CHECKING:
    import torch


def load(path: PathLike, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """The saved state of a complete checkpoint; ``model`` is always the full state dict.

    Sharded checkpoints are gathered into full tensors (no process group needed).
    """
    path = Path(path)
    meta = read_meta(path)
    if meta["format"] == "full":
        return read_full(path, map_location)
    from noderun.runtime.sharded import load_full  # DCP is imported only for a sharded one

    return load_full(path, map_location)
