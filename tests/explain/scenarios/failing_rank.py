"""A noderun training-like script whose rank FAIL_RANK fails in the way MODE says.

MODE: sigkill (the rank is SIGKILLed), oom (a huge host allocation), hang (the rank skips a
collective so the others time out), missing-file (the rank loads a checkpoint that is absent).
"""

import os
import signal
import sys
import time

import torch

import noderun

mode, fail_rank = sys.argv[1], int(sys.argv[2])
torch.set_num_threads(1)
with noderun.init() as ctx:
    ctx.print(f"training on {ctx.world_size} ranks")
    for step in range(3):
        if ctx.rank == fail_rank and step == 1:
            if mode == "sigkill":
                os.kill(os.getpid(), signal.SIGKILL)
            elif mode == "oom":
                torch.empty(10**13)  # 40 TB: the host allocator refuses
            elif mode == "hang":
                time.sleep(60)
            elif mode == "missing-file":
                torch.load(f"/tmp/noderun-fixture-absent/rank{ctx.rank}/epoch-0003.pt")
        loss = ctx.all_reduce_mean(float(step))
        ctx.print(f"step {step} loss {loss}")
