"""``python -m noderun.stacks.node --job J``: dump the ranks of job J on this node, as JSON lines.

Started by ``noderun stacks`` (and the stall watcher) through ``srun --overlap`` on every node
of a running job; prints ``{"stack": …, "run_dir": …}`` per rank and ``{"note": …}`` per problem,
each as ``srun_lines`` pieces.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Sequence
from pathlib import Path

from noderun.srun_lines import write_marked
from noderun.stacks import capture

MARKER = "NODERUN-STACK "


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m noderun.stacks.node", description=__doc__)
    parser.add_argument("--job", required=True, help="SLURM job id of the ranks")
    parser.add_argument("--run-dir", type=Path, help="only the ranks of this run directory")
    parser.add_argument("--py-spy", default="", help="py-spy to use (default: PATH)")
    args = parser.parse_args(argv)
    node = os.environ.get("SLURMD_NODENAME")  # nodes may share a process table (the lab)
    ranks = capture.find_ranks(run_dir=args.run_dir, job_id=args.job, node=node)
    stacks, notes = capture.take(ranks, args.py_spy or capture.py_spy_path())
    by_rank = {rp.rank: rp.run_dir for rp in ranks}
    # numbered short pieces: srun cuts a line at 1 KiB, and a deep stack with long paths is longer
    for note in notes:
        write_marked(MARKER, json.dumps({"note": note}))
    for stack in stacks:
        write_marked(MARKER, json.dumps({"stack": stack.to_dict(), "run_dir": by_rank[stack.rank]}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
