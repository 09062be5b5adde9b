"""Did the ranks form ONE process group? Written by each rank, judged by the launcher and verify.

A script that never calls ``init_process_group`` (Fabric without ``LT_*``, accelerate on CPU
without ``ACCELERATE_USE_CPU``, Lightning without ``num_nodes``) runs N independent trainings
that all "complete". The rank entry calls ``install()`` before the user's script: once torch's
``distributed_c10d`` is imported, its ``init_process_group`` is wrapped to note the world size
it formed, and at exit the rank leaves ``RUN_DIR/logs/rank<R>.group.json`` — only if the script
imported torch at all. Standard library only, and nothing imported before the script runs
(the rank entry loads this file by path).
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.abc
import importlib.machinery
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

_C10D = "torch.distributed.distributed_c10d"
SUFFIX = ".group.json"
# modules whose presence names the framework, most specific first
FRAMEWORKS = (
    ("lightning.pytorch", "lightning"),
    ("pytorch_lightning", "lightning"),
    ("lightning.fabric", "fabric"),
    ("lightning_fabric", "fabric"),
    ("accelerate", "accelerate"),
)
_seen: dict[str, Any] = {"init_calls": 0, "world_size": 0}


def _wrap(module: Any) -> None:
    original: Callable[..., Any] = module.init_process_group

    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        _seen["init_calls"] += 1
        with contextlib.suppress(Exception):
            _seen["world_size"] = max(_seen["world_size"], int(module.get_world_size()))
        return result

    init_process_group.__wrapped__ = original  # type: ignore[attr-defined]
    init_process_group.__doc__ = original.__doc__
    module.init_process_group = init_process_group


class _Loader(importlib.abc.Loader):
    def __init__(self, inner: importlib.abc.Loader) -> None:
        self.inner = inner

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Any:
        return self.inner.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self.inner.exec_module(module)
        with contextlib.suppress(Exception):  # never break the user's import
            _wrap(module)


class _Finder(importlib.abc.MetaPathFinder):
    """Wraps the loader of torch's c10d module, once; every other import passes through."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: Any = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != _C10D:
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader)
        return spec


def install(run_dir: str | None, rank: str | None) -> None:
    """Watch init_process_group in this rank; write the record at exit (atexit)."""
    if not run_dir or rank is None or not rank.isdigit() or _C10D in sys.modules:
        return
    sys.meta_path.insert(0, _Finder())
    atexit.register(_write, Path(run_dir) / "logs" / f"rank{rank}{SUFFIX}", int(rank))


def _framework_of(module_name: str) -> str | None:
    return next((name for prefix, name in FRAMEWORKS if module_name.startswith(prefix)), None)


def _frameworks_used() -> tuple[list[str], int | None]:
    """The frameworks the script's own globals hold (a Fabric, a Trainer, an Accelerator, or
    their classes), else those imported; and the smallest world one of them reported."""
    used: set[str] = set()
    worlds: list[int] = []
    main = sys.modules.get("__main__")
    for value in list(getattr(main, "__dict__", {}).values()):
        kind = value if isinstance(value, type) else type(value)
        name = _framework_of(getattr(kind, "__module__", "") or "")
        if name is None:
            continue
        used.add(name)
        with contextlib.suppress(Exception):
            if not isinstance(value, type) and hasattr(value, "world_size"):
                worlds.append(int(value.world_size))
            elif not isinstance(value, type) and hasattr(value, "num_processes"):
                worlds.append(int(value.num_processes))
    if not used:
        used = {name for module, name in FRAMEWORKS if module in sys.modules}
        if "fabric" in used and "lightning" in used:
            used.discard("lightning")  # `import lightning` loads both; Fabric is the smaller
    return sorted(used), min(worlds) if worlds else None


def _write(path: Path, rank: int) -> None:
    if "torch" not in sys.modules:
        return  # not a torch script: nothing to judge
    frameworks, framework_world = _frameworks_used()
    record = {
        "rank": rank,
        "init_calls": _seen["init_calls"],
        "world_size": _seen["world_size"],
        "frameworks": frameworks,
        "framework_world": framework_world,  # what Fabric/Trainer/Accelerator said it ran on
    }
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(record) + "\n")
        os.replace(tmp, path)


def read(run_dir: Path) -> list[dict[str, Any]]:
    """Every rank's record (ranks that never imported torch left none)."""
    records = []
    for path in sorted((run_dir / "logs").glob(f"rank*{SUFFIX}")):
        with contextlib.suppress(OSError, ValueError):
            record = json.loads(path.read_text())
            if isinstance(record, dict):
                records.append(record)
    return records


def _distributed(record: dict[str, Any]) -> bool:
    """This rank took part in a group of more than one, and its framework (if any) knew it."""
    framework_world = record.get("framework_world")
    return int(record.get("world_size") or 0) > 1 and (
        framework_world is None or int(framework_world) > 1
    )


def _fix(frameworks: set[str], nnodes: int, nproc: int) -> str:
    if "lightning" in frameworks:
        return (
            f"pass Trainer(num_nodes={nnodes}, devices={nproc}) (Lightning takes one node and "
            "one device unless told)"
        )
    if "fabric" in frameworks:
        return (
            f"pass Fabric(num_nodes={nnodes}, devices={nproc}) or set LT_NUM_NODES={nnodes} "
            f"LT_DEVICES={nproc} (noderun run --env LT_DEVICES={nproc} …)"
        )
    if "accelerate" in frameworks:
        return (
            "accelerate on CPU distributes only with ACCELERATE_USE_CPU=1 (noderun run --env "
            "ACCELERATE_USE_CPU=1 …) or Accelerator(cpu=True)"
        )
    return (
        "call torch.distributed.init_process_group() (env:// reads the RANK, WORLD_SIZE, "
        "MASTER_ADDR and MASTER_PORT noderun sets) and wrap the model in DistributedDataParallel"
    )


def not_one_group(run_dir: Path, world_size: int, nnodes: int = 1) -> str | None:
    """One line when ``world_size`` ranks ran torch but never formed one group; else None."""
    if world_size <= 1:
        return None
    records = read(run_dir)
    if len(records) < world_size:
        return None  # some rank left no record (not torch, or killed): nothing certain
    if any(_distributed(r) for r in records):
        return None
    biggest = max(int(r.get("world_size") or 0) for r in records)
    frameworks = {name for r in records for name in r.get("frameworks") or ()}
    if all(not r.get("init_calls") for r in records):
        what = "the script never called init_process_group"
    elif biggest > 1:
        what = (
            f"a group of {biggest} formed, but {'/'.join(sorted(frameworks)) or 'the script'} "
            "ran every rank as a single process"
        )
    else:
        what = "each rank formed a process group of one"
    seen = f" ({', '.join(sorted(frameworks))} seen)" if frameworks else ""
    nproc = max(world_size // max(nnodes, 1), 1)
    return (
        f"{world_size} ranks ran as {world_size} independent single-process trainings: "
        f"{what}{seen}; hint: {_fix(frameworks, nnodes, nproc)}"
    )


def report(run_dir: Path, world_size: int, nnodes: int, exit_code: int) -> int:
    """The launcher's last line when the run completed without one group; ``exit_code`` kept."""
    note = not_one_group(run_dir, world_size, nnodes) if exit_code == 0 else None
    if note:
        print(f"noderun: warning: NOT distributed: {note}", file=sys.stderr, flush=True)
    return exit_code
