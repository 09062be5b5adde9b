"""Says whether the ranks got their secrets (never their values), then waits (fault table).

SECRET_PROBE_SLEEP: seconds to wait after the all_reduce (default 6)."""

import os
import time

import noderun

ctx = noderun.init()
ctx.all_reduce_sum(1.0)
got = [k for k in ("HF_TOKEN", "WANDB_API_KEY", "MY_OPT") if os.environ.get(k)]
print(f"rank {ctx.rank} has {','.join(got) or 'nothing'}", flush=True)
(ctx.run_dir / f"probe_ready_{ctx.rank}").touch()
time.sleep(float(os.environ.get("SECRET_PROBE_SLEEP", "6")))
ctx.barrier()
