"""One point of the lab's sweep test: --mode ok trains (step_trainer.py), fail raises, preempt
trains but waits at step 6 for SIGUSR1 (once per run directory: the requeued task does not).

noderun sweep --submit --param mode=ok,fail,preempt --nnodes 2 tests/scripts/sweep_point.py
"""

from __future__ import annotations

import argparse
import os
import runpy
import sys
from pathlib import Path

parser = argparse.ArgumentParser()
parser.add_argument("--mode", choices=("ok", "fail", "preempt"), required=True)
mode = parser.parse_args().mode
if mode == "fail":
    raise RuntimeError("sweep_point: deliberate failure")
if mode == "preempt":
    os.environ["NODERUN_DEBUG_WAIT_FOR_SIGNAL"] = "all:6"
    os.environ["NODERUN_PREEMPT_CHECK_SEC"] = "0"
trainer = str(Path(__file__).with_name("step_trainer.py"))
sys.argv = [trainer, "--resume", "auto", "--max-steps", "12"]
runpy.run_path(trainer, run_name="__main__")
