"""Which of ``noderun run``'s options each way of launching reads; one given as a flag for
another way is refused in one line, never ignored.

    noderun run --join-timeout 5 train.py        # simulated nodes here: refused, names the fix
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping

from noderun.verbs import run_in_step, run_slurm, run_ssh
from noderun.verbs.options import refuse_unless_applies

LOCAL, SSH, BY_HAND, SLURM, IN_STEP = "local", "ssh", "by hand", "slurm", "in step"
# options only some ways read (every other option applies to all of them)
_ONLY_FOR: dict[str, tuple[str, ...]] = {
    "mode": (SLURM, IN_STEP),
    "join_timeout": (SLURM, BY_HAND, IN_STEP),
    "ssh_config": (SSH,),
    # `srun noderun run --node-rank $SLURM_NODEID --master-addr NODE0`: torchrun's static form
    "node_rank": (BY_HAND, IN_STEP),
    "master_addr": (BY_HAND, IN_STEP),
}
_WHERE = {
    LOCAL: "on simulated nodes of this machine",
    SSH: "over ssh (--hosts/--hostfile)",
    BY_HAND: "on nodes started by hand (--node-rank/--master-addr)",
    SLURM: "inside a SLURM allocation",
    IN_STEP: "inside an srun step",
}
_HINTS = {
    "mode": "drop it (it chooses how ranks start inside sbatch/salloc), or use "
    "`noderun submit --mode …`",
    "join_timeout": "drop it: the nodes here start together",
    "ssh_config": "add --hosts HOST,HOST (or --hostfile), or drop it",
    "node_rank": "drop it: this way of launching numbers the nodes itself",
    "master_addr": "drop it: node 0 is the first node of this launch",
}


def way(args: argparse.Namespace, environ: Mapping[str, str]) -> str:
    """How ``run`` launches, in the order ``run.main`` decides it."""
    if run_ssh.wanted(args):
        return SSH
    if run_in_step.wanted(args, environ):  # `srun noderun run`: one node (or rank) of one job
        return IN_STEP
    if run_slurm.inside_allocation(environ):
        return SLURM
    if getattr(args, "node_rank", None) is not None or getattr(args, "master_addr", None):
        return BY_HAND
    return LOCAL


def refuse_other_ways(args: argparse.Namespace, environ: Mapping[str, str]) -> None:
    """UsageError for the first option given as a flag that this way of launching ignores."""
    chosen = way(args, environ)
    for name, ways in _ONLY_FOR.items():
        if chosen not in ways:
            refuse_unless_applies(args, (name,), f"does not apply {_WHERE[chosen]}", _HINTS[name])
