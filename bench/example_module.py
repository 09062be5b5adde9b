"""The classifier example (examples/ddp_classifier.py) as a module, for the loop benchmarks."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "ddp_classifier.py"


def load_example() -> ModuleType:
    if str(EXAMPLE.parent) not in sys.path:  # its digits.py beside it
        sys.path.insert(0, str(EXAMPLE.parent))
    spec = importlib.util.spec_from_file_location("ddp_classifier", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
