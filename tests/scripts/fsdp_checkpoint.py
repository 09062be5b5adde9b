"""FSDP2 (fully_shard) on CPU/gloo: train, save a sharded checkpoint, train on; then a fresh
model resumes from it and trains the same steps. Rank 0 writes what the test compares."""

from __future__ import annotations

import torch
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.fsdp import fully_shard

import noderun
from noderun.runtime.training_state import Checkpointer, Position

FULL = StateDictOptions(full_state_dict=True, cpu_offload=True)


def build() -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 4))
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    return model, torch.optim.AdamW(model.parameters(), lr=1e-2)


def train(ctx: noderun.Context, model: nn.Module, opt: torch.optim.Optimizer, steps: range) -> None:
    for step in steps:
        generator = torch.Generator().manual_seed(1000 * ctx.rank + step)
        x, y = torch.randn(16, 8, generator=generator), torch.randn(16, 4, generator=generator)
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()


with noderun.init() as ctx:
    model, opt = build()
    ckpt = Checkpointer(ctx, model, opt)
    assert ckpt.sharded
    train(ctx, model, opt, range(0, 3))
    path = ckpt.save(Position(0, 3, 3), {"note": "sharded"}, wait=True)
    at_save = get_model_state_dict(model, options=FULL)
    train(ctx, model, opt, range(3, 6))
    uninterrupted = get_model_state_dict(model, options=FULL)

    model, opt = build()
    resumer = Checkpointer(ctx, model, opt)
    position = resumer.resume(path)
    train(ctx, model, opt, range(position.global_step, 6))
    resumed = get_model_state_dict(model, options=FULL)
    if ctx.is_main:
        torch.save(
            {"path": str(path), "at_save": at_save, "a": uninterrupted, "b": resumed},
            ctx.run_dir / "fsdp_result.pt",
        )
    ctx.print(f"sharded checkpoint {path} resumed at global step {position.global_step}")
