"""``ctx.prepare`` with DDP and with FSDP2 (``shard=True``) from the same initial weights and
the same per-rank batches: both must end with the same weights. Rank 0 writes what it saw."""

from __future__ import annotations

import torch
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.tensor import DTensor
from torch.nn.parallel import DistributedDataParallel

import noderun

FULL = StateDictOptions(full_state_dict=True, cpu_offload=True)


class Blocks(nn.Module):
    """An embedding, a ModuleList of blocks (the units FSDP2 shards) and a head."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(6, 16)
        self.layers = nn.ModuleList(nn.Sequential(nn.Linear(16, 16), nn.Tanh()) for _ in range(3))
        self.head = nn.Linear(16, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x)
        for layer in self.layers:
            h = h + layer(h)
        return self.head(h)


def train(ctx: noderun.Context, shard: bool) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    model = ctx.prepare(Blocks(), shard=shard)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for step in range(4):
        generator = torch.Generator().manual_seed(100 * ctx.rank + step)
        x, y = torch.randn(8, 6, generator=generator), torch.randn(8, 2, generator=generator)
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    inner = getattr(model, "module", model)
    return model, get_model_state_dict(inner, options=FULL)


torch.set_num_threads(1)
with noderun.init() as ctx:
    ddp, ddp_state = train(ctx, shard=False)
    fsdp, fsdp_state = train(ctx, shard=True)
    local = {n: p.to_local().numel() for n, p in fsdp.named_parameters() if isinstance(p, DTensor)}
    total = {n: tuple(p.shape) for n, p in fsdp.named_parameters()}
    if ctx.is_main:
        torch.save(
            {
                "ddp_wrapped": isinstance(ddp, DistributedDataParallel),
                "fsdp_modules": sorted(
                    name for name, m in fsdp.named_modules() if type(m).__name__.startswith("FSDP")
                ),
                "local": local,
                "total": total,
                "ddp": ddp_state,
                "fsdp": fsdp_state,
                "world_size": ctx.world_size,
            },
            ctx.run_dir / "prepare_result.pt",
        )
