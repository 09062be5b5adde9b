"""Gather a small object from every rank to rank 0 without stopping training.

A checkpoint needs every rank's RNG states (and extras) but rank 0 needs them only when it
commits, in its background thread. So each rank packs its object into a fixed-size slot and
starts an asynchronous ``gather`` on a side gloo group; rank 0's commit thread waits for it.
The same objects are pickled between our own ranks, as ``all_gather_object`` would do.
"""

from __future__ import annotations

import io
import pickle
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from noderun.runtime.context import Context

SLOT_BYTES = 256 * 1024  # RNG states are ~12 KB; extras must stay small
_HEADER = 8


class RankStateGather:
    """``start(obj)`` on every rank; rank 0 gets a function returning all objects in rank order."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self._group: Any = dist.new_group(backend="gloo") if ctx.distributed else None
        self._sent: list[tuple[Any, torch.Tensor]] = []  # outstanding sends and their buffers

    def start(self, obj: Any) -> Callable[[], list[Any]] | None:
        """Begin gathering ``obj``; returns the waiter on rank 0, None elsewhere."""
        if self._group is None:
            return lambda: [obj]
        payload = _dumps(obj)
        if len(payload) > SLOT_BYTES - _HEADER:  # still take part, so no rank waits forever
            payload = pickle.dumps(
                _TooLarge(f"rank {self.ctx.rank}: checkpoint extras pickle to {len(payload)} bytes")
            )
        slot = torch.empty(SLOT_BYTES, dtype=torch.uint8)  # only header + payload are read
        slot[:_HEADER] = torch.tensor(list(len(payload).to_bytes(_HEADER, "little")))
        slot[_HEADER : _HEADER + len(payload)] = torch.frombuffer(
            bytearray(payload), dtype=torch.uint8
        )
        if not self.ctx.is_main:
            work = dist.gather(slot, None, dst=0, group=self._group, async_op=True)
            self._sent.append((work, slot))
            return None
        slots = [torch.empty(SLOT_BYTES, dtype=torch.uint8) for _ in range(self.ctx.world_size)]
        work = dist.gather(slot, slots, dst=0, group=self._group, async_op=True)

        def collect() -> list[Any]:
            work.wait()
            objects = [_unpack(s) for s in slots]
            for item in objects:
                if isinstance(item, _TooLarge):
                    raise ValueError(f"{item.message}; keep them under {SLOT_BYTES - _HEADER}")
            return objects

        return collect

    def wait_sent(self) -> None:
        """Non-main ranks: block until rank 0 has received what they sent."""
        sent, self._sent = self._sent, []
        for work, _ in sent:
            work.wait()


class _Pickler(pickle.Pickler):
    """Plain CPU tensors travel as numpy arrays: torch's own pickling of a tensor writes a
    small torch.save archive per tensor, ~10x slower for the RNG states' three tensors."""

    def reducer_override(self, obj: Any) -> Any:
        if type(obj) is torch.Tensor and obj.device.type == "cpu" and not obj.requires_grad:
            try:
                return _tensor, (obj.numpy(),)
            except (TypeError, RuntimeError):  # bfloat16, a conjugate view: torch's own way
                return NotImplemented
        return NotImplemented


def _tensor(array: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(array)


def _dumps(obj: Any) -> bytes:
    buffer = io.BytesIO()
    _Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
    return buffer.getvalue()


class _TooLarge:
    def __init__(self, message: str) -> None:
        self.message = message


def _unpack(slot: torch.Tensor) -> Any:
    view = slot.numpy()
    size = int.from_bytes(view[:_HEADER].tobytes(), "little")
    return pickle.loads(view[_HEADER : _HEADER + size].tobytes())  # not the whole slot
