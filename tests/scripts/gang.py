"""Test workload: init, one all_reduce, then a behaviour chosen by GANG_MODE.

GANG_MODE: ok (default) | raise:<rank> | sigkill:<rank> | hang (all ranks loop on collectives)
| latekill:<rank> (the others fail at once with a lost-peer error, <rank> is SIGKILLed 1.5 s later)
"""

import os
import signal
import sys
import time

import noderun

ctx = noderun.init()
total = ctx.all_reduce_sum(float(ctx.rank))
print(f"rank {ctx.rank} of {ctx.world_size} on node {ctx.node_rank} sum={total:g}", flush=True)
mode, _, who = os.environ.get("GANG_MODE", "ok").partition(":")
if mode == "raise" and ctx.rank == int(who):
    raise ValueError(f"deliberate failure on rank {ctx.rank}")
if mode == "sigkill" and ctx.rank == int(who):
    time.sleep(0.5)
    (ctx.run_dir / "killed_at").write_text(repr(time.time()))  # for the teardown-time test
    os.kill(os.getpid(), signal.SIGKILL)
if mode == "latekill":  # the peers report "lost it" first, as after a real cut connection
    if ctx.rank != int(who):
        raise RuntimeError("Read error [127.0.0.1]:1: Connection reset by peer (simulated)")
    time.sleep(1.5)
    os.kill(os.getpid(), signal.SIGKILL)
if mode in ("hang", "sigkill", "raise"):
    for _ in range(3000):
        ctx.all_reduce_sum(1.0)
        time.sleep(0.1)
ctx.barrier()
sys.exit(0)
