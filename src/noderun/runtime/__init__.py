"""What runs inside each rank: init(), the Context, metrics and checkpoints.

``init``, ``Context`` and ``pick_backend`` are imported on first use: the verbs that only read a
run's files (verify reads ``runtime.metrics``' columns) must not pay for torch."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from noderun.runtime.context import Context, init, pick_backend

__all__ = ["Context", "init", "pick_backend"]


def __getattr__(name: str) -> object:
    if name in __all__:
        from noderun.runtime import context

        return getattr(context, name)
    raise AttributeError(f"module 'noderun.runtime' has no attribute {name!r}")
