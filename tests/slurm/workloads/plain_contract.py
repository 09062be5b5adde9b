"""An unmodified plain-torch script: reads only RANK/LOCAL_RANK/WORLD_SIZE (+ env:// MASTER_*).

Prints one JSON line per rank with what it saw, including its arguments byte for byte.
"""

import json
import os
import socket
import sys

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
value = torch.tensor([float(rank + 1)])
dist.all_reduce(value)
seen = {
    "rank": rank,
    "local_rank": int(os.environ["LOCAL_RANK"]),
    "world_size": world,
    "sum": value.item(),
    "host": socket.gethostname(),
    "argv": sys.argv[1:],
    "agent_store": os.environ.get("TORCHELASTIC_USE_AGENT_STORE"),
}
os.write(1, ("CONTRACT " + json.dumps(seen) + "\n").encode())
dist.destroy_process_group()
