"""The run directory: run.json, runtime.json, metrics.csv, logs/, checkpoints/ (DESIGN.md)."""

from __future__ import annotations

import datetime
import json
import secrets
import time
from pathlib import Path
from typing import Any

from noderun import atomic

RUN_JSON = "run.json"
RUNTIME_JSON = "runtime.json"
METRICS_CSV = "metrics.csv"
LOGS = "logs"
CHECKPOINTS = "checkpoints"


def new_run_dir(script: str, root: Path = Path("runs")) -> Path:
    """``runs/<script>-<date>-<time>-<4 hex>``: unique even for two runs in the same second."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return root / f"{Path(script).stem}-{stamp}-{secrets.token_hex(2)}"


def now_iso() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    """Write JSON to a temporary name, fsync, rename: readers never see half a file."""
    atomic.write_text(path, json.dumps(data, indent=2, default=str) + "\n")


def read_json(path: Path) -> dict[str, Any]:
    with open(path) as handle:
        data = json.load(handle)
    if not isinstance(data, dict):
        raise ValueError(f"{path} does not hold a JSON object")
    return data
