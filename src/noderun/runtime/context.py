"""``noderun.init()``: resolve the topology, set the device by local rank, start the group."""

from __future__ import annotations

import atexit
import contextlib
import datetime
import gc
import json
import os
import platform
import socket
import sys
import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

import torch
import torch.distributed as dist

from noderun import atomic, failures, timeline
from noderun.errors import NoderunError
from noderun.plan.profile import PROFILE_ENV, parse_profile
from noderun.runtime import heartbeat, profiling
from noderun.runtime.rendezvous import fail_fast_store
from noderun.topology import Launcher, Topology
from noderun.topology.contract import RankContract

T = TypeVar("T")

_active: Context | None = None  # the context init() returned, for error records
DEFAULT_JOIN_TIMEOUT = 30.0
DEFAULT_COLLECTIVE_TIMEOUT = 600.0


def _scalar(value: Any) -> float:
    """A float of a number or a one-element tensor (a loss: no requires_grad warning)."""
    if isinstance(value, torch.Tensor):
        return float(value.detach().item())
    return float(value)


def _env_float(environ: Mapping[str, str], name: str, default: float) -> float:
    raw = environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return float(raw)
    except ValueError:
        raise NoderunError(f"{name}={raw!r} is not a number", f"set {name} to seconds") from None


def pick_backend(cuda_available: bool, requested: str | None = None) -> str:
    """NCCL with CUDA, gloo without; an explicit request wins."""
    if requested:
        return requested
    return "nccl" if cuda_available else "gloo"


class Context:
    """What a training script needs from the distributed runtime, ready to use."""

    def __init__(self, topology: Topology, backend: str, device: torch.device, run_dir: Path):
        self.topology = topology
        self.backend = backend
        self.device = device
        self.run_dir = run_dir
        self._store: Any = None
        self._closed = False

    rank = property(lambda self: self.topology.rank)
    local_rank = property(lambda self: self.topology.local_rank)
    world_size = property(lambda self: self.topology.world_size)
    node_rank = property(lambda self: self.topology.node_rank)
    is_main = property(lambda self: self.topology.rank == 0)

    @property
    def distributed(self) -> bool:
        return dist.is_available() and dist.is_initialized()

    def print(self, *args: Any, **kwargs: Any) -> None:
        """``print`` on rank 0 only, flushed, written as one line."""
        if self.is_main:
            text = " ".join(str(a) for a in args)
            sys.stdout.write(text + kwargs.get("end", "\n"))
            sys.stdout.flush()

    def barrier(self) -> None:
        if self.distributed:
            dist.barrier()

    def all_reduce_mean(self, value: T) -> T:
        """Mean over ranks of a float, a tensor, or a dict of floats; same type back."""
        with profiling.phase("comm"):
            reduced: T = self._all_reduce(value, mean=True)
        return reduced

    def all_reduce_sum(self, value: T) -> T:
        """Sum over ranks of a float, a tensor, or a dict of floats; same type back."""
        with profiling.phase("comm"):
            reduced: T = self._all_reduce(value, mean=False)
        return reduced

    def _all_reduce(self, value: Any, mean: bool) -> Any:
        heartbeat.beat()
        if isinstance(value, Mapping):
            keys = list(value)
            reduced = self._all_reduce(
                torch.tensor([_scalar(value[k]) for k in keys], dtype=torch.float64), mean
            )
            return {k: float(v) for k, v in zip(keys, reduced.tolist(), strict=True)}
        if isinstance(value, torch.Tensor):
            tensor = value.detach().clone()
            if self.distributed:
                on_device = tensor.to(self.device) if self.backend == "nccl" else tensor
                dist.all_reduce(on_device)
                tensor = on_device.to(value.device)
            return tensor / self.world_size if mean else tensor
        tensor = self._all_reduce(torch.tensor(_scalar(value), dtype=torch.float64), mean)
        return float(tensor.item())

    def broadcast_object(self, obj: T, src: int = 0) -> T:
        """Send a picklable object from ``src`` to every rank."""
        if not self.distributed:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=src)
        return box[0]  # type: ignore[no-any-return]

    def gather_object(self, obj: T) -> list[T]:
        """Every rank's ``obj``, in rank order, on every rank."""
        if not self.distributed:
            return [obj]
        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, obj)
        return out

    def loader(
        self,
        dataset: Any,
        batch_size: int,
        shuffle: bool = True,
        drop_last: bool = False,
        seed: int = 0,
        **kwargs: Any,
    ) -> torch.utils.data.DataLoader[Any]:
        """A DataLoader over this rank's shard (DistributedSampler); ``set_epoch`` it each epoch."""
        from torch.utils.data import DataLoader, DistributedSampler

        sampler: DistributedSampler[Any] = DistributedSampler(
            dataset,
            num_replicas=self.world_size,
            rank=self.rank,
            shuffle=shuffle,
            seed=seed,
            drop_last=drop_last,
        )
        return DataLoader(dataset, batch_size=batch_size, sampler=sampler, **kwargs)

    @staticmethod
    def profile(batches: Iterable[T]) -> Iterable[T]:
        """``batches`` with each fetch starting a step for ``--profile`` (a loop that uses
        neither ``EpochTimer.iterate`` nor ``Checkpointer.steps``); unchanged when it is off."""
        return profiling.profile_batches(batches)

    @staticmethod
    def set_epoch(loader: torch.utils.data.DataLoader[Any], epoch: int) -> None:
        """Reshuffle a ``loader()`` for ``epoch`` (the step people forget)."""
        sampler = loader.sampler
        if hasattr(sampler, "set_epoch"):
            sampler.set_epoch(epoch)

    def prepare(
        self,
        model: torch.nn.Module,
        *,
        shard: bool = False,
        layers: Iterable[torch.nn.Module] | None = None,
        mixed_precision: bool | None = None,
    ) -> torch.nn.Module:
        """Move ``model`` to this rank's device and, when distributed, wrap it for data parallel.

        ``shard=False``: DDP (every rank holds the whole model, gradients all-reduced).
        ``shard=True``: FSDP2 ``fully_shard`` on each of ``layers`` (default: the blocks of the
        model's outermost ``nn.ModuleList``s, e.g. a transformer's decoder layers) and on the
        root, so parameters, gradients and optimizer state are split across ranks.
        ``mixed_precision`` (default: on with CUDA): bf16 compute, fp32 gradient reduction.
        A single process gets the model on its device, unwrapped."""
        model = model.to(self.device)
        if not self.distributed:
            pass
        elif shard:
            model = _fully_shard(model, self.device, layers, mixed_precision)
        else:
            from torch.nn.parallel import DistributedDataParallel

            ids = [self.device.index] if self.device.type == "cuda" else None
            model = DistributedDataParallel(model, device_ids=ids)
        profiling.watch(model)  # --profile: its forward and backward become phases
        return model

    def shutdown(self, *, synchronize: bool = True) -> None:
        """Destroy the process group; safe to call twice and at exit.

        With ``synchronize`` (a clean end) every rank first meets at a barrier, so no rank tears
        its connections down while a peer is still mid-collective, and the tensors finished
        collectives still hold are freed while the interpreter is fully alive: gloo otherwise
        may abort a rank at exit ("terminate called without an active exception")."""
        if self._closed:
            return
        self._closed = True
        profiler = profiling.current()
        if profiler is not None:  # the run ended inside (or before) the profiling window
            profiler.finish(ended_early=True)
        if not self.distributed:
            return
        if synchronize:
            with contextlib.suppress(Exception):  # a peer gone already: nothing to wait for
                dist.barrier()
        gc.collect()
        dist.destroy_process_group()

    def __enter__(self) -> Context:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *rest: object) -> None:
        self.shutdown(synchronize=exc_type is None)

    def __repr__(self) -> str:
        return f"Context({self.topology.describe()}, backend={self.backend}, device={self.device})"


def _default_run_dir(environ: Mapping[str, str]) -> Path:
    launched = RankContract.from_env(environ).run_dir
    if launched:
        return Path(launched)
    script = Path(sys.argv[0]).stem if sys.argv and sys.argv[0] else "run"
    return Path("runs") / f"{script}-{time.strftime('%Y%m%d-%H%M%S')}"


def init(
    run_dir: str | os.PathLike[str] | None = None,
    backend: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> Context:
    """Resolve rank/local_rank/world size from any launcher and set up the process group.

    Works under ``noderun run``, plain ``torchrun``, plain ``srun`` and bare ``python``.
    """
    env = os.environ if environ is None else environ
    started = time.monotonic()
    topo = Topology.from_env(env)
    cuda = torch.cuda.is_available()
    topo.validate(torch.cuda.device_count() if cuda else 0)
    chosen = pick_backend(cuda, backend or env.get("NODERUN_BACKEND"))
    if chosen == "nccl":
        torch.cuda.set_device(topo.local_rank)
        device = torch.device("cuda", topo.local_rank)
    else:
        device = torch.device("cpu")
    contract = RankContract.from_env(env)
    # read by name, not from the contract: a value that is not a number is refused, not ignored
    join_timeout = _env_float(env, RankContract.variable(env, "join_timeout"), DEFAULT_JOIN_TIMEOUT)
    timeout = _env_float(env, "NODERUN_TIMEOUT", DEFAULT_COLLECTIVE_TIMEOUT)
    try:
        parse_profile(env.get(PROFILE_ENV, ""))  # refused before any rank waits for another
    except ValueError as err:
        raise NoderunError(f"{PROFILE_ENV}: {err}", f"fix or unset {PROFILE_ENV}") from None
    ctx = Context(topo, chosen, device, Path("."))
    if topo.is_distributed:
        pg_timeout = datetime.timedelta(seconds=timeout)
        if topo.launcher is Launcher.TORCHRUN:
            # torchrun's agents already met; workers reuse the agent store through env://
            dist.init_process_group(chosen, timeout=pg_timeout)
        else:
            agent_store = env.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
            ctx._store = fail_fast_store(topo, join_timeout, timeout, agent_store)
            dist.init_process_group(
                chosen,
                store=ctx._store,
                rank=topo.rank,
                world_size=topo.world_size,
                timeout=pg_timeout,
            )
    ctx.run_dir = Path(run_dir) if run_dir else ctx.broadcast_object(_default_run_dir(env))
    if contract.run_dir:  # a noderun launcher keeps the job's timeline
        timeline.stamp(ctx.run_dir, "process_group_up", f"rank{ctx.rank}")
    hosts = ctx.gather_object(socket.gethostname())
    if ctx.is_main:
        _write_runtime_json(ctx, hosts, time.monotonic() - started)
    atexit.register(ctx.shutdown, synchronize=False)
    heartbeat.install(ctx.rank, env)
    profiling.install(ctx.rank, ctx.run_dir, env, cuda=device.type == "cuda")
    global _active
    _active = ctx
    _record_uncaught(ctx)
    return ctx


def _record_uncaught(ctx: Context) -> None:
    """An uncaught exception leaves ``logs/rank<R>.error.json`` with a precise time, so the
    launcher names the rank that failed first, not a peer that merely lost its connection."""
    previous = sys.excepthook

    def hook(kind: type[BaseException], value: BaseException, tb: Any) -> None:
        record_error(value)
        previous(kind, value, tb)

    sys.excepthook = hook


def record_error(error: BaseException, exit_code: int = 1) -> None:
    """Leave this rank's error record for the launcher (before ``init()``: from the launcher's
    environment, so a refusal before any process group still names this rank and its code)."""
    ctx = _active
    if ctx is None:
        failures.record(error, exit_code)
    else:
        failures.record(error, exit_code, ctx.run_dir, ctx.rank, ctx.node_rank)


def _write_runtime_json(ctx: Context, hosts: list[str], init_seconds: float) -> None:
    """Rank 0 records what the runtime saw, for ``noderun verify``."""
    ctx.run_dir.mkdir(parents=True, exist_ok=True)
    record = {
        "topology": ctx.topology.to_dict(),
        "backend": ctx.backend,
        "device": str(ctx.device),
        "world_size": ctx.world_size,
        "rank_hosts": hosts,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "init_seconds": round(init_seconds, 3),
        "process_group_initialized": ctx.distributed,
    }
    atomic.write_text(ctx.run_dir / "runtime.json", json.dumps(record, indent=2) + "\n")


def shard_units(model: torch.nn.Module) -> Iterator[torch.nn.Module]:
    """The blocks of ``model``'s outermost ``nn.ModuleList``s (a transformer's layers), in order;
    a list nested inside one of them is not descended into."""
    for child in model.children():
        if isinstance(child, torch.nn.ModuleList):
            yield from child
        else:
            yield from shard_units(child)


def _fully_shard(
    model: torch.nn.Module,
    device: torch.device,
    layers: Iterable[torch.nn.Module] | None,
    mixed_precision: bool | None,
) -> torch.nn.Module:
    """FSDP2 over every rank: each unit of ``layers`` sharded on its own, then the root."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    bf16 = device.type == "cuda" if mixed_precision is None else mixed_precision
    policy = (
        MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        if bf16
        else MixedPrecisionPolicy()
    )
    for unit in shard_units(model) if layers is None else layers:
        fully_shard(unit, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    return model
