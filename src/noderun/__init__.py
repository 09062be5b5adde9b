"""noderun: multi-node PyTorch training that launches right the first time."""

from noderun.errors import NoderunError, TopologyError, UsageError
from noderun.topology import Launcher, Topology

__version__ = "0.1.0"

__all__ = [
    "Context",
    "Launcher",
    "NoderunError",
    "Topology",
    "TopologyError",
    "TrainingLoop",
    "UsageError",
    "__version__",
    "init",
]


def __getattr__(name: str) -> object:
    # torch is imported only when the runtime is used, so the CLI starts fast
    if name in ("init", "Context"):
        from noderun import runtime

        return getattr(runtime, name)
    if name == "TrainingLoop":
        from noderun.runtime.loop import TrainingLoop

        return TrainingLoop
    raise AttributeError(name)
