"""Writes what a rank sees (launcher variables, argv, __name__, sys.path[0]) to
$PROBE_OUT/rank<RANK>.json; imports neither torch nor noderun."""

import json
import os
import sys

SEEN = (
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
    "ROLE_RANK", "ROLE_NAME", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
    "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS",
    "TORCHELASTIC_USE_AGENT_STORE", "OMP_NUM_THREADS",
)  # fmt: skip
seen = {name: os.environ.get(name) for name in SEEN}
seen.update(argv=sys.argv, name=__name__, path0=sys.path[0], cwd=os.getcwd())
out = os.path.join(os.environ["PROBE_OUT"], f"rank{os.environ['RANK']}.json")
with open(out, "w") as handle:
    json.dump(seen, handle)
