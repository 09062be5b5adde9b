"""``noderun verify``: is a finished run healthy? PASS/FAIL per check, facts, exit 0/1.

The verifier imports torch (to read checkpoints): it is imported when first asked for, so the
torch-free parts (``noderun.verify.target``, ``.model``) cost a verb no ``import torch``.
"""

from typing import TYPE_CHECKING, Any

from noderun.verify.model import Check, Expectations, Report, Status

if TYPE_CHECKING:
    from noderun.verify.verifier import verify_run_dir

__all__ = ["Check", "Expectations", "Report", "Status", "verify_run_dir"]


def __getattr__(name: str) -> Any:
    if name == "verify_run_dir":
        from noderun.verify.verifier import verify_run_dir

        return verify_run_dir
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
