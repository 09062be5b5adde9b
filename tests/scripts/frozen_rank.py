"""Steps with an all_reduce and a line each; rank FROZEN_RANK stops itself with SIGSTOP at step
5 (alive, silent: the fault table's frozen rank). Ends by itself after 600 steps otherwise."""

import os
import signal
import time

import noderun
from noderun.runtime import heartbeat

ctx = noderun.init()
frozen = int(os.environ.get("FROZEN_RANK", "3"))
for step in range(1, 601):
    heartbeat.beat()
    ctx.all_reduce_sum(1.0)
    print(f"rank {ctx.rank} step {step}", flush=True)
    if step == 5 and ctx.rank == frozen:
        (ctx.run_dir / "frozen_at").write_text(repr(time.time()))
        os.kill(os.getpid(), signal.SIGSTOP)
    time.sleep(0.05)
