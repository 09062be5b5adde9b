"""noderun.init() + all_reduce in a loop; rank --die-rank SIGKILLs itself after a few steps.

It writes the time of death to RUN_DIR/killed_at first, so a test can time the teardown.
"""

import argparse
import os
import signal
import time

import torch

import noderun

parser = argparse.ArgumentParser()
parser.add_argument("--die-rank", type=int, default=-1)
parser.add_argument("--steps-before", type=int, default=3)
args = parser.parse_args()

ctx = noderun.init()
ctx.print(f"started {ctx.world_size} ranks")
deadline = time.monotonic() + 300
step = 0
while time.monotonic() < deadline:
    ctx.all_reduce_sum(torch.ones(1))
    step += 1
    if ctx.rank == args.die_rank and step == args.steps_before:
        (ctx.run_dir / "killed_at").write_text(f"{time.time()}\n")
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(0.1)
