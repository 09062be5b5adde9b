"""``--profile`` of ``run`` and ``submit``: the option, and handing the spec to the ranks."""

from __future__ import annotations

import argparse
from pathlib import Path

from noderun.plan.profile import PROFILE_DIR, PROFILE_ENV, ProfileSpec, parse_profile
from noderun.verbs.options import Option, value


def profile_spec(text: str) -> ProfileSpec | None:
    """argparse type: ``steps=A:B,ranks=R,R|all,trace=0|1``, ``on`` or ``off``."""
    try:
        return parse_profile(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


PROFILE_OPTION: Option = value(
    "--profile",
    type=profile_spec,
    metavar="SPEC",
    help="profile steps A to B of ranks R (steps=5:10,ranks=0,1 | ranks=all | trace=0 | on): "
    "torch.profiler traces and a per-rank table of data/forward/backward/comm/optimizer/"
    f"checkpoint time in RUN_DIR/{PROFILE_DIR}/; needs a script that calls noderun.init()",
)


def profile_env(args: argparse.Namespace) -> dict[str, str]:
    """The variable every rank reads in ``noderun.init()``; {} when not profiling."""
    spec: ProfileSpec | None = getattr(args, "profile", None)
    return {PROFILE_ENV: spec.text()} if spec is not None else {}


def report_profile(run_dir: Path, args: argparse.Namespace) -> None:
    """After the ranks: write the table, or say in one line why there is none."""
    if getattr(args, "profile", None) is None:
        return
    from noderun.verify.profile_report import write_breakdown

    path = write_breakdown(run_dir)
    if path is not None:
        print(f"noderun: profile: {path} (traces beside it)", flush=True)
    else:
        print(
            f"noderun: profile: no rank wrote one: {PROFILE_ENV} is read by noderun.init(), "
            "and steps are counted by EpochTimer.iterate, Checkpointer.steps or ctx.profile(); "
            "a script without them cannot be profiled per step",
            flush=True,
        )
