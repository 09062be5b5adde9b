"""Plain script (no noderun, no torch): ``exit_with.py CODE WHO`` exits CODE on rank WHO (or on
every rank with ``all``); the other ranks wait to be stopped, as ranks blocked in a collective."""

import os
import sys
import time

code, who = int(sys.argv[1]), sys.argv[2]
rank = int(os.environ["RANK"])
if who == "all" or int(who) == rank:
    print(f"rank {rank} exits {code}", flush=True)
    sys.exit(code)
time.sleep(120)
