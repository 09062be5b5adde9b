"""``noderun.checkpoint``: save, load and resume training state (see runtime.checkpoint).

The save contract: ``Checkpointer.save(position)`` is collective (every rank, same point);
``save_state(state, directory, tag)`` writes a plain state dict on one rank only (rank 0);
``save`` is a deprecated alias of ``save_state`` that warns.

state = noderun.checkpoint.load("runs/x/checkpoints/epoch-0012")
state["model"]        # the full model state dict, also for sharded checkpoints
"""

from noderun.runtime.checkpoint import (
    CHECKPOINTS_DIR,
    checkpoints,
    is_complete,
    latest,
    read_meta,
    resolve,
    save,
    save_state,
)
from noderun.runtime.loading import load
from noderun.runtime.training_state import Checkpointer, Position

__all__ = [
    "CHECKPOINTS_DIR",
    "Checkpointer",
    "Position",
    "checkpoints",
    "is_complete",
    "latest",
    "load",
    "read_meta",
    "resolve",
    "save",
    "save_state",
]
