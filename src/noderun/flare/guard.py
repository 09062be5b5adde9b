"""On a non-zero rank of a FLARE site, ``flare.init`` as rank 0 fails with one line.

Only global rank 0 may talk to the FLARE client (seed 000's ``flare.init timeout``: several
processes each claiming to be the site's trainer). The guard wraps the FLARE trainer API when
it is imported, so a script that never imports noderun is covered too.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from noderun.errors import UsageError

GUARDED_MODULE = "nvflare.client.cell.api"


class FlareRankError(UsageError):
    """A rank other than global rank 0 tried to become the site's FLARE trainer."""


def rank_error(rank: int, claimed: str) -> FlareRankError:
    return FlareRankError(
        f"rank {rank} called flare.init as rank {claimed}: only global rank 0 may talk to FLARE "
        "(every rank as a client is what ends in `flare.init timeout`)",
        "call flare.init() without rank= (it reads RANK), or flare.init(rank=os.environ['RANK']),"
        " and broadcast the model from rank 0; noderun.flare.FederatedSite does both",
    )


def _guarded_init(global_rank: int, original: Any) -> Any:
    def init(self: Any, rank: str | None = None) -> Any:  # FLARE calls init(rank=...)
        claimed = str(rank if rank is not None else os.environ.get("RANK", "0"))
        if claimed == "0":
            raise rank_error(global_rank, claimed)
        return original(self, rank=rank)

    return init


class _Loader(importlib.abc.Loader):
    def __init__(self, inner: importlib.abc.Loader, rank: int):
        self.inner = inner
        self.rank = rank

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.inner.exec_module(module)
        api = module.CellClientAPI
        api.init = _guarded_init(self.rank, api.init)


class _Finder(importlib.abc.MetaPathFinder):
    def __init__(self, rank: int):
        self.rank = rank

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != GUARDED_MODULE:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader, self.rank)  # type: ignore[arg-type]
        return spec


def install(rank: int) -> None:
    """Guard this process (global rank ``rank`` != 0) before the training script runs."""
    if rank != 0 and not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder(rank))
