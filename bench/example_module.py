"""The classifier example (examples/ddp_classifier.py) as a module, for the loop benchmarks."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "ddp_classifier.py"


def load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("ddp_classifier", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
