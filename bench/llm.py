"""LoRA fine-tuning throughput at 1, 2 and 4 gloo ranks, per-rank training state of FSDP2 vs DDP,
and the example's loop against the same loop written with plain torch, in the same processes.

The model is a random Llama from a config (SmolLM2's vocabulary and layout, narrower, no weights
to load), with the LoRA adapter of examples/llm. At each world size, alternating:
- noderun: ``ctx.prepare(model, shard=True)`` and one optimizer step of examples/llm/finetune.py
  (its micro-batches, gradient_sync and token_loss over the example's data Stream);
- plain torch: ``fully_shard`` on the decoder layers and the root by hand, the same step inline.
State per rank = bytes of the local parameters + gradients + AdamW state, from the tensors
(DTensor: the local shard), after one step, for FSDP2 and for DDP (``prepare(shard=False)``).

    .venv/bin/python bench/llm.py [--reps 3] [--steps 2] [--worlds 1 2 4]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from two_ranks import run_two_ranks

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "llm"
STATE_TARGET = 0.35
SPEED_TARGET = 0.95
SEQ, BATCH, ACCUM = 128, 2, 2


def _model(lora: Any) -> torch.nn.Module:
    from modeling import with_lora
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=49152,
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=True,
        use_cache=False,
    )
    return with_lora(LlamaForCausalLM(config), lora)


def _local_bytes(tensor: torch.Tensor | None) -> int:
    from torch.distributed.tensor import DTensor

    if tensor is None:
        return 0
    local = tensor.to_local() if isinstance(tensor, DTensor) else tensor
    return int(local.numel() * local.element_size())


def state_bytes(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> int:
    """This rank's parameters + gradients + optimizer state, from the tensors."""
    total = sum(_local_bytes(p) + _local_bytes(p.grad) for p in model.parameters())
    for state in optimizer.state.values():
        total += sum(_local_bytes(v) for v in state.values() if isinstance(v, torch.Tensor))
    return total


def _worker(reps: int, steps: int) -> dict[str, Any]:
    sys.path.insert(0, str(EXAMPLE))
    torch.set_num_threads(1)
    import torch.distributed as dist
    from finetune import gradient_sync, step_batches, token_loss
    from instructions import Blocks, Stream
    from settings import LoraConfig
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    import noderun

    lora = LoraConfig(r=8, alpha=16, dropout=0.05, target_modules=["q_proj", "v_proj"])
    ctx = noderun.init()
    world, rank = ctx.world_size, ctx.rank
    data = torch.randint(0, 49152, (64, SEQ), generator=torch.Generator().manual_seed(1))
    stream = Stream(Blocks(data, data.clone()), seed=0)

    def optimizer_for(model: torch.nn.Module) -> torch.optim.Optimizer:
        return torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)

    def noderun_step(model: torch.nn.Module, opt: torch.optim.Optimizer, consumed: int) -> None:
        at = {"samples": consumed}  # the example's stream position (TrainingLoop's state)
        micro_batches = next(step_batches(stream, at, rank, world, BATCH, ACCUM))
        for m, (ids, labels) in enumerate(micro_batches):
            with gradient_sync(model, m == ACCUM - 1):
                total, count = token_loss(model, ids, labels)
                (total / count.clamp(min=1) / ACCUM).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    def plain_step(model: torch.nn.Module, opt: torch.optim.Optimizer, consumed: int) -> None:
        for micro in range(ACCUM):
            index = consumed + (micro * world + rank) * BATCH
            ids, labels = stream.batch(index, BATCH)
            if world > 1:
                model.set_requires_gradient_sync(micro == ACCUM - 1)  # type: ignore[operator]
            logits = model(input_ids=ids).logits[:, :-1].float()
            target = labels[:, 1:]
            loss = torch.nn.functional.cross_entropy(
                logits.reshape(-1, logits.shape[-1]), target.reshape(-1), reduction="sum"
            ) / (target != -100).sum().clamp(min=1)
            (loss / ACCUM).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    ours = ctx.prepare(_model(lora), shard=True)
    plain = _model(lora)
    if world > 1:  # the same sharding, written by hand
        mesh = init_device_mesh("cpu", (world,))
        for layer in plain.base_model.model.model.layers:
            fully_shard(layer, mesh=mesh)
        fully_shard(plain, mesh=mesh)
    loops = {
        "noderun": (ours, optimizer_for(ours), noderun_step),
        "plain": (plain, optimizer_for(plain), plain_step),
    }
    tokens = {"noderun": [], "plain": []}  # type: dict[str, list[float]]
    consumed = {"noderun": 0, "plain": 0}
    for model, opt, step in loops.values():  # warm-up
        step(model, opt, 0)
    for rep in range(reps):
        order = list(loops) if rep % 2 == 0 else list(loops)[::-1]
        for name in order:
            model, opt, step = loops[name]
            ctx.barrier()
            began = time.perf_counter()
            for _ in range(steps):
                step(model, opt, consumed[name])
                consumed[name] += BATCH * ACCUM * world
            ctx.barrier()
            tokens[name].append(steps * BATCH * ACCUM * world * SEQ / (time.perf_counter() - began))
    state = {"fsdp": state_bytes(ours, loops["noderun"][1])}
    del loops, ours, plain
    ddp = ctx.prepare(_model(lora), shard=False)
    ddp_opt = optimizer_for(ddp)
    noderun_step(ddp, ddp_opt, 0)
    state["ddp"] = state_bytes(ddp, ddp_opt)
    if dist.is_initialized():
        ctx.barrier()
    ctx.shutdown()
    return {"tokens": tokens, "state": state}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--steps", type=int, default=2, help="optimizer steps per measurement")
    parser.add_argument("--worlds", type=int, nargs="+", default=[1, 2, 4])
    args = parser.parse_args()
    results = {}
    for world in args.worlds:
        with tempfile.TemporaryDirectory(prefix="noderun-bench-llm-", dir=".") as root:
            results[world] = run_two_ranks(
                _worker, (args.reps, args.steps), root, timeout=1200, world=world
            )
    paired = []
    for world, result in results.items():
        ours, plain = result["tokens"]["noderun"], result["tokens"]["plain"]
        ratios = [a / b for a, b in zip(ours, plain, strict=True)]
        paired += ratios
        state = result["state"]
        print(
            f"{world} rank(s): noderun {statistics.median(ours):7.0f} tokens/s, plain torch "
            f"{statistics.median(plain):7.0f} tokens/s (ratio {statistics.median(ratios):.3f}); "
            f"per-rank state FSDP2 {state['fsdp'] / 2**20:.1f} MiB, DDP "
            f"{state['ddp'] / 2**20:.1f} MiB ({state['fsdp'] / state['ddp']:.3f})"
        )
    widest = max(results)
    fraction = results[widest]["state"]["fsdp"] / results[widest]["state"]["ddp"]
    ratio = statistics.median(paired)
    print(
        f"FSDP2/DDP per-rank state at {widest} ranks = {fraction:.3f} (target <= {STATE_TARGET}); "
        f"ratio noderun/plain torch tokens/s = {ratio:.3f} (target >= {SPEED_TARGET})"
    )


if __name__ == "__main__":
    main()
