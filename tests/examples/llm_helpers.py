"""Shared pieces of the LLM example's tests: its modules on sys.path, a finetune command line,
and the metrics/step lines a run leaves."""

from __future__ import annotations

import csv
import importlib
import re
import sys
from pathlib import Path
from types import ModuleType

from tests.conftest import ROOT, run_args

EXAMPLE = ROOT / "examples" / "llm"
FINETUNE = EXAMPLE / "finetune.py"
if str(EXAMPLE) not in sys.path:
    sys.path.insert(0, str(EXAMPLE))

EVAL_LINE = re.compile(r"step (\d+)/\d+ \| eval loss ([0-9.]+)")
STEP_LINE = re.compile(r"step (\d+)/(\d+) \| loss ([0-9.]+) \| lr ([0-9.e+-]+) \| (\d+) tokens/s")


def finetune_args(
    run_dir: Path, model: Path, dataset: Path, nnodes: int, nproc: int, *overrides: str
) -> list[str]:
    """``noderun run`` of the example on a tiny model: 64-token blocks, 1 x 2 micro-batches."""
    return [
        *run_args(FINETUNE, run_dir, nnodes, nproc),
        "--model.name_or_path",
        str(model),
        "--data.dataset_path",
        str(dataset),
        "--data.max_seq_length",
        "64",
        "--training.per_device_batch_size",
        "1",
        "--training.gradient_accumulation_steps",
        "2",
        "--training.learning_rate",
        "0.01",
        *overrides,
    ]


def metrics(run_dir: Path) -> dict[int, dict[str, str]]:
    with open(run_dir / "metrics.csv", newline="") as handle:
        return {int(row["step"]): row for row in csv.DictReader(handle)}


def eval_lines(stdout: str) -> dict[int, float]:
    return {int(m.group(1)): float(m.group(2)) for m in EVAL_LINE.finditer(stdout)}


def example(name: str) -> ModuleType:
    """A module of examples/llm (``prepare_data``, ``tiny_model``, …)."""
    return importlib.import_module(name)
