"""Bytecode for noderun before a benchmark, as an installed package has it.

pip writes ``.pyc`` files when it installs a wheel (torch's and submitit's are there); an
editable install in a shell with ``PYTHONDONTWRITEBYTECODE=1`` (this machine's) has none, so
every noderun process of a job would compile noderun's modules again (~0.05-0.1 s each).
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path


def compile_noderun() -> None:
    spec = importlib.util.find_spec("noderun")
    assert spec is not None and spec.origin is not None
    package = Path(spec.origin).parent
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(package)], check=True)
