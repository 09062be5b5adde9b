"""What every rank of a FLARE site runs: ``rank_entry.py SCRIPT [ARGS…]`` (torchrun's script).

Installs the flare.init guard on non-zero ranks, then runs SCRIPT as ``__main__``; a noderun
error (the guard's included) is one line on stderr and its exit code.
"""

import os
import sys

# Run as a file, this folder is sys.path[0]; the user's script folder belongs there instead.
sys.path[0] = os.path.dirname(os.path.abspath(sys.argv[1])) if len(sys.argv) > 1 else ""

import runpy  # noqa: E402

from noderun.errors import NoderunError  # noqa: E402
from noderun.flare import guard  # noqa: E402


def main() -> int:
    if len(sys.argv) < 2:
        sys.stderr.write("usage: rank_entry.py SCRIPT [ARGS...]\n")
        return 2
    guard.install(int(os.environ.get("RANK", "0")))
    sys.argv = sys.argv[1:]
    try:
        runpy.run_path(sys.argv[0], run_name="__main__")
    except NoderunError as err:
        sys.stderr.write(f"{type(err).__name__}: {err}\n")
        sys.stderr.flush()
        return err.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
