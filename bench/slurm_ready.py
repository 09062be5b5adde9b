"""Benchmark workload (plain torch): after init_process_group + barrier, each rank writes the
wall-clock time to READY_DIR/rank<R>, so the benchmark sees when all ranks were up."""

import os
import sys
import time
from pathlib import Path

import torch.distributed as dist

dist.init_process_group("gloo")
dist.barrier()
ready = time.time()
out = Path(sys.argv[1]) / f"rank{dist.get_rank()}"
out.write_text(f"{ready}\n")
dist.destroy_process_group()
os.write(1, f"rank {os.environ['RANK']} ready\n".encode())
