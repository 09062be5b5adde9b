"""Writes this rank's whole environment to $DUMP_OUT/rank<RANK>.json; imports nothing else."""

import json
import os

with open(os.path.join(os.environ["DUMP_OUT"], f"rank{os.environ['RANK']}.json"), "w") as out:
    json.dump(dict(os.environ), out)
