"""The command a FLARE client runs for its site: ``python -m noderun.flare.site_launch``.

    python -m noderun.flare.site_launch --site site-1 --launcher slurm --nnodes 2 \
        --nproc-per-node 2 custom/train.py --lr 0.1

FLARE appends ``custom/<script> <args>``. The site's capacity is checked first (one line, exit 2,
nothing started); then ``noderun run`` starts the ranks, each through ``rank_entry.py``. A local
site drops the SLURM variables of an allocation it may sit in, so it never takes a SLURM site's
nodes or port.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from noderun import proc_guard
from noderun.errors import NoderunError
from noderun.flare.sites import LAUNCHERS, Site, capacity_problem

RANK_ENTRY = Path(__file__).with_name("rank_entry.py")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m noderun.flare.site_launch")
    parser.add_argument("--site", required=True)
    parser.add_argument("--launcher", choices=list(LAUNCHERS), default="local")
    parser.add_argument("--nnodes", type=int, default=1)
    parser.add_argument("--nproc-per-node", type=int, default=1)
    parser.add_argument("script")
    parser.add_argument("script_args", nargs=argparse.REMAINDER)
    return parser


def gpu_count() -> int:
    """GPUs this process may use: CUDA_VISIBLE_DEVICES, else /dev/nvidiaN (no CUDA init)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([d for d in visible.split(",") if d.strip()])
    return sum(1 for p in Path("/dev").glob("nvidia[0-9]*"))


def run_argv(site: Site, script: str, script_args: Sequence[str], run_dir: Path) -> list[str]:
    """``noderun run`` arguments that start the site's ranks through the rank entry."""
    return [
        "run",
        "--nnodes",
        str(site.nnodes),
        "--nproc-per-node",
        str(site.nproc_per_node),
        "--run-dir",
        str(run_dir),
        str(RANK_ENTRY),
        script,
        *script_args,
    ]


def local_environ(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` without SLURM's variables: a local site ignores an allocation around it."""
    return {k: v for k, v in environ.items() if not k.startswith(("SLURM_", "SLURMD_"))}


def main(argv: Sequence[str] | None = None) -> int:
    proc_guard.die_with_parent(signal.SIGTERM)  # the FLARE client gone: tear the ranks down
    args = _parser().parse_args(argv)
    try:
        site = Site(args.site, args.nnodes, args.nproc_per_node, args.launcher)
        problem = capacity_problem(site, os.environ, os.cpu_count() or 1, gpu_count())
        if problem:
            raise problem
        if not Path(args.script).is_file():
            raise NoderunError(
                f"site {site.name}: script {args.script!r} not found in {Path.cwd()}",
                "check the job's train_script",
            )
    except NoderunError as err:
        print(f"noderun: error: {err}", file=sys.stderr, flush=True)
        return 2
    if site.launcher == "local":
        environ = local_environ(os.environ)
        os.environ.clear()
        os.environ.update(environ)
    run_dir = Path.cwd() / "runs" / f"{site.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    from noderun.cli import main as noderun_main

    return noderun_main(run_argv(site, args.script, args.script_args, run_dir))


if __name__ == "__main__":
    sys.exit(main())
