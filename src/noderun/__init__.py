"""noderun: multi-node PyTorch training that launches right the first time."""

from noderun.errors import NoderunError, TopologyError, UsageError
from noderun.topology import Launcher, Topology

__version__ = "0.1.0"

__all__ = [
    "STEP_COLUMNS",
    "Checkpointer",
    "Context",
    "EpochProgress",
    "EpochTimer",
    "Launcher",
    "MetricsLogger",
    "NoderunError",
    "Position",
    "Preemption",
    "Topology",
    "TopologyError",
    "TrainingLoop",
    "UsageError",
    "__version__",
    "checkpoint",
    "init",
    "run_main",
]

# what a training script needs, by name: (module, attribute); imported on first use, so the CLI
# (which imports this package) never pays for torch
_LAZY: dict[str, tuple[str, str]] = {
    "init": ("noderun.runtime.context", "init"),
    "Context": ("noderun.runtime.context", "Context"),
    "TrainingLoop": ("noderun.runtime.loop", "TrainingLoop"),
    "Checkpointer": ("noderun.runtime.training_state", "Checkpointer"),
    "Position": ("noderun.runtime.training_state", "Position"),
    "Preemption": ("noderun.runtime.preemption", "Preemption"),
    "MetricsLogger": ("noderun.runtime.metrics", "MetricsLogger"),
    "EpochTimer": ("noderun.runtime.metrics", "EpochTimer"),
    "STEP_COLUMNS": ("noderun.runtime.metrics", "STEP_COLUMNS"),
    "EpochProgress": ("noderun.runtime.progress", "EpochProgress"),
    "run_main": ("noderun.runtime.entry", "run_main"),
}


def __getattr__(name: str) -> object:
    import importlib

    if name == "checkpoint":  # noderun.checkpoint.load/latest/is_complete
        return importlib.import_module("noderun.checkpoint")
    if name in _LAZY:
        module, attribute = _LAZY[name]
        return getattr(importlib.import_module(module), attribute)
    raise AttributeError(f"module 'noderun' has no attribute {name!r}")
