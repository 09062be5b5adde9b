"""Load what a run directory holds, once, tolerating every missing or broken file."""

from __future__ import annotations

import csv
import dataclasses
import math
from pathlib import Path
from typing import Any

from noderun import rundir
from noderun.errors import UsageError

RUN_FILES = (rundir.RUN_JSON, rundir.RUNTIME_JSON, rundir.METRICS_CSV, rundir.LOGS)


@dataclasses.dataclass
class Loaded:
    """A JSON or CSV file: its content, or why it could not be read (``error``)."""

    path: Path
    data: Any = None
    error: str = ""

    @property
    def ok(self) -> bool:
        return not self.error


@dataclasses.dataclass(frozen=True)
class LogSign:
    """A sign of health a library printed in the logs (explain's table): value and where."""

    value: str
    where: str  # file:line
    text: str


@dataclasses.dataclass
class RunEvidence:
    """Everything the checks look at; files are read once here."""

    run_dir: Path
    run: Loaded
    runtime: Loaded
    metrics_header: list[str]
    metrics: Loaded  # data: list of rows, each a dict column -> raw text
    # where the metrics come from: noderun's metrics.csv, or a Lightning CSVLogger's
    metrics_source: str = "noderun"
    # signs in the logs (explain's SIGN table): kind -> first one seen
    signs: dict[str, LogSign] = dataclasses.field(default_factory=dict)

    @property
    def noderun_runtime(self) -> bool:
        """The script used noderun's runtime: runtime.json (noderun.init()), noderun's
        metrics.csv or noderun's checkpoints; a plain script leaves none of them."""
        return (
            self.runtime.ok
            or (self.run_dir / rundir.METRICS_CSV).is_file()
            or any((self.run_dir / rundir.CHECKPOINTS).glob("*/meta.json"))
        )

    @property
    def run_record(self) -> dict[str, Any]:
        return self.run.data if self.run.ok else {}

    @property
    def runtime_record(self) -> dict[str, Any]:
        return self.runtime.data if self.runtime.ok else {}

    @property
    def rows(self) -> list[dict[str, str]]:
        return self.metrics.data if self.metrics.ok else []

    @property
    def epochs_completed(self) -> int | None:
        """Distinct epochs in the metrics (Lightning logs a train and a val row per epoch);
        None when the run left no per-epoch metrics: unknown, not zero."""
        if "epoch" not in self.metrics_header or not self.rows:
            return None
        return len({row.get("epoch") for row in self.rows if row.get("epoch") not in (None, "")})


def require_run_dir(target: Path) -> Path:
    """The directory itself, or a one-line UsageError when it is not a run directory."""
    if not target.exists():
        raise UsageError(f"{target} does not exist", "pass a run directory (runs/<name>-…)")
    if not target.is_dir():
        raise UsageError(f"{target} is not a directory", "pass a run directory (runs/<name>-…)")
    if not any((target / name).exists() for name in RUN_FILES):
        raise UsageError(
            f"{target} is not a run directory (no run.json, runtime.json, metrics.csv or logs/)",
            "pass the directory `noderun run` printed",
        )
    return target


def load_json(path: Path) -> Loaded:
    if not path.is_file():
        return Loaded(path, error=f"{path.name} is missing")
    try:
        return Loaded(path, rundir.read_json(path))
    except (OSError, ValueError) as err:  # JSONDecodeError is a ValueError
        return Loaded(path, error=f"{path.name} is unreadable: {str(err).splitlines()[0]}")


def _load_csv(path: Path) -> tuple[list[str], Loaded]:
    if not path.is_file():
        return [], Loaded(path, error=f"{path.name} is missing")
    try:
        with open(path, newline="") as handle:
            reader = csv.DictReader(handle)
            rows = list(reader)
            header = list(reader.fieldnames or [])
    except (OSError, UnicodeDecodeError, csv.Error) as err:
        return [], Loaded(path, error=f"{path.name} is unreadable: {err}")
    return header, Loaded(path, rows)


def lightning_metrics(run_dir: Path) -> Path | None:
    """The newest Lightning CSVLogger file under the run directory (lightning_logs/version_N)."""
    found = [p for p in run_dir.rglob("metrics.csv") if p != run_dir / rundir.METRICS_CSV]
    return max(found, key=lambda p: p.stat().st_mtime) if found else None


def load_evidence(run_dir: Path) -> RunEvidence:
    header, metrics = _load_csv(run_dir / rundir.METRICS_CSV)
    source = "noderun"
    other = None if metrics.ok else lightning_metrics(run_dir)
    if other is not None:
        header, metrics = _load_csv(other)
        source = str(other.relative_to(run_dir))
    return RunEvidence(
        run_dir=run_dir,
        run=load_json(run_dir / rundir.RUN_JSON),
        runtime=load_json(run_dir / rundir.RUNTIME_JSON),
        metrics_header=header,
        metrics=metrics,
        metrics_source=source,
        signs=log_signs(run_dir),
    )


def log_signs(run_dir: Path) -> dict[str, LogSign]:
    """What the libraries said about the run in its logs: every rank registered, backend…"""
    logs = sorted((run_dir / rundir.LOGS).glob("*.log")) if (run_dir / rundir.LOGS).is_dir() else []
    return file_signs(logs)


def file_signs(logs: list[Path]) -> dict[str, LogSign]:
    """The signs of health in ``logs`` (a run's rank logs, or a plain job's output files)."""
    from noderun.explain.findings import Ranker
    from noderun.explain.scanner import Scanner
    from noderun.explain.signatures import SIGNATURES, Tier

    ranker = Ranker({p: i for i, p in enumerate(logs)}, {})
    scanner = Scanner([s for s in SIGNATURES if s.tier is Tier.SIGN])
    for path in logs:
        try:
            ranker.add_file(path, scanner.scan(path))
        except OSError:
            continue
    signs: dict[str, LogSign] = {}
    for (kind, value), (hit, _) in ranker.signs.items():
        signs.setdefault(kind, LogSign(value, f"{hit.path.name}:{hit.line}", hit.text))
    return signs


def number(text: str | None) -> float | None:
    """A CSV cell as a float; '' -> None; 'nan' -> nan; garbage -> nan (caught as not finite)."""
    if text is None or text.strip() == "":
        return None
    try:
        return float(text)
    except ValueError:
        return math.nan
