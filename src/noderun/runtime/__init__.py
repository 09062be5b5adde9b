"""What runs inside each rank: init(), the Context, metrics and checkpoints."""

from noderun.runtime.context import Context, init, pick_backend

__all__ = ["Context", "init", "pick_backend"]
