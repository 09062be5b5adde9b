"""``noderun verify``: is a finished run healthy? PASS/FAIL per check, facts, exit 0/1."""

from noderun.verify.model import Check, Expectations, Report, Status
from noderun.verify.verifier import verify_run_dir

__all__ = ["Check", "Expectations", "Report", "Status", "verify_run_dir"]
