"""A plain-torch job that runs until stopped (no noderun): every rank prints a tick a tenth of a
second, after an all_reduce; at most --ticks of them."""

import argparse
import os
import time

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--ticks", type=int, default=3000)
ticks = parser.parse_args().ticks
dist.init_process_group("gloo")
rank = int(os.environ["RANK"])
for tick in range(ticks):
    value = torch.tensor([1.0])
    dist.all_reduce(value)
    print(f"plain rank {rank} tick {tick}", flush=True)
    time.sleep(0.1)
dist.destroy_process_group()
