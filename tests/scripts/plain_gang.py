"""A plain torch script (no noderun import): init, one all_reduce, then PLAIN_MODE.

PLAIN_MODE: sigkill:<rank> (that rank SIGKILLs itself; the others keep calling all_reduce and
die of "Connection closed by peer") | raise:<rank> (that rank raises ValueError).
"""

import os
import signal
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = int(os.environ["RANK"])
value = torch.tensor([1.0])
dist.all_reduce(value)
print(f"plain-gang rank={rank} ready", flush=True)
mode, _, who = os.environ.get("PLAIN_MODE", "sigkill:3").partition(":")
if rank == int(who):
    time.sleep(0.5)
    if mode == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    raise ValueError(f"deliberate failure on rank {rank}")
for _ in range(3000):
    dist.all_reduce(value)
    time.sleep(0.01)
