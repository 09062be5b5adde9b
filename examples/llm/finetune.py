"""LoRA fine-tuning of a causal LM, FSDP2-sharded across every rank (seed 001's job).

    python examples/llm/prepare_data.py --out data/pydoc_instructions.jsonl
    noderun run --nnodes 2 --nproc-per-node 2 examples/llm/finetune.py \\
        [--config examples/llm/config.yaml] [--training.max_steps 60] [--resume auto] …

Every config key is an option (``--section.key VALUE``). The config and every path it names
are checked before the process group starts. The steps run in ``noderun.TrainingLoop``'s step
mode: rank 0 prints ``step / loss / lr / tokens/s`` lines and writes metrics.csv (a row per
logged step); every ``eval_steps`` the held-out loss is averaged over all ranks' shards of the
held-out topics (step 0: the base model); every ``save_steps`` (and on preemption) a sharded
checkpoint (DCP: each rank its shard, optimizer, scheduler, step, samples seen, RNG) that
resumes on any world size; at the end rank 0 writes the LoRA adapter
(``adapter/``: adapter_model.safetensors + adapter_config.json) and, with
``export_merged: true``, the merged model (``merged/``).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import settings

HERE = Path(__file__).resolve().parent


def configure(argv: Sequence[str] | None) -> tuple[settings.Config, tuple[Path, str | None]]:
    """The checked config and the model's location; a mistake is a UsageError (exit 2)."""
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").splitlines()[0],
        epilog="config keys (each also --KEY VALUE): " + ", ".join(settings.KEYS),
    )
    parser.add_argument("--config", type=Path, default=HERE / "config.yaml")
    args, rest = parser.parse_known_args(argv)
    config = settings.load(args.config, settings.parse_overrides(rest))
    return config, settings.check_paths(config)


def lr_lambda(t: settings.TrainingConfig) -> Callable[[int], float]:
    """Linear warmup over ``warmup_steps``, then cosine/linear decay to 0 or constant."""

    def factor(step: int) -> float:
        if step < t.warmup_steps:
            return (step + 1) / (t.warmup_steps + 1)
        progress = (step - t.warmup_steps) / max(1, t.max_steps - t.warmup_steps)
        if t.lr_scheduler == "cosine":
            return 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0)))
        if t.lr_scheduler == "linear":
            return max(0.0, 1.0 - progress)
        return 1.0

    return factor


def token_loss(model: Any, ids: Any, labels: Any) -> tuple[Any, Any]:
    """(sum of next-token cross-entropy over labelled tokens, their number)."""
    import torch

    logits = model(input_ids=ids).logits[:, :-1].float()
    target = labels[:, 1:]
    total = torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), target.reshape(-1), ignore_index=-100, reduction="sum"
    )
    return total, (target != -100).sum()


def gradient_sync(model: Any, sync: bool) -> contextlib.AbstractContextManager[Any]:
    """Skip the gradient reduction of all but the last micro-batch (FSDP2 or DDP)."""
    if hasattr(model, "set_requires_gradient_sync"):  # FSDP2
        model.set_requires_gradient_sync(sync)
        return contextlib.nullcontext()
    if not sync and hasattr(model, "no_sync"):  # DDP
        return model.no_sync()  # type: ignore[no-any-return]
    return contextlib.nullcontext()


def evaluate(ctx: Any, model: Any, blocks: Any, batch_size: int) -> float:
    """Mean token loss over every held-out block, each rank its share, summed over ranks."""
    import torch
    from instructions import eval_batches

    model.eval()  # TrainingLoop puts it back in train mode
    total = torch.zeros(2, dtype=torch.float64)
    with torch.no_grad():
        for ids, labels in eval_batches(blocks, ctx.rank, ctx.world_size, batch_size):
            loss, count = token_loss(model, ids.to(ctx.device), labels.to(ctx.device))
            total += torch.stack([loss.double().cpu(), count.double().cpu()])
    loss_sum, count = ctx.all_reduce_sum(total).tolist()
    return float(loss_sum / max(count, 1.0))


def export_adapter(ctx: Any, model: Any, directory: Path) -> None:
    """Collective: gather the LoRA weights; rank 0 writes them as a peft adapter directory."""
    from torch.distributed.tensor import DTensor

    inner = getattr(model, "module", model)  # DDP wraps, FSDP2 does not
    trainable = {}
    for name, param in inner.named_parameters():
        if param.requires_grad:
            full = param.full_tensor() if isinstance(param, DTensor) else param
            trainable[name] = full.detach().cpu().clone()
    if ctx.is_main:
        inner.save_pretrained(directory, state_dict=trainable, save_embedding_layers=False)
    ctx.barrier()


def export_merged(location: tuple[Path, str | None], adapter: Path, out: Path) -> None:
    """Rank 0: the base model with the adapter merged in, as a plain model directory."""
    from modeling import load_pretrained
    from peft import PeftModel

    tokenizer, base = load_pretrained(*location)
    merged = PeftModel.from_pretrained(base, adapter).merge_and_unload()
    merged.save_pretrained(out)
    tokenizer.save_pretrained(out)


def step_batches(
    stream: Any, state: dict[str, Any], rank: int, world: int, size: int, accum: int
) -> Iterator[list[tuple[Any, Any]]]:
    """Each optimizer step's micro-batches, endlessly, from the stream position ``samples`` in
    ``state`` (the loop's checkpointed state): micro-batch m of rank r is the stream's samples
    ``samples + (m * world + r) * size`` onwards. The position moves on as a step is handed out,
    so the checkpoint taken at its end holds it."""
    while True:
        consumed = state.setdefault("samples", 0)
        state["samples"] = consumed + accum * world * size
        yield [stream.batch(consumed + (m * world + rank) * size, size) for m in range(accum)]


def train(config: settings.Config, location: tuple[Path, str | None]) -> None:
    import torch
    from instructions import Stream, pack, read_jsonl
    from modeling import load_pretrained, with_lora

    import noderun

    t = config.training
    with noderun.init(run_dir=config.output_dir or None) as ctx:
        torch.manual_seed(t.seed)
        tokenizer, base = load_pretrained(*location)  # a GGUF file is parsed once for both
        rows = read_jsonl(Path(config.data.dataset_path))
        length = config.data.max_seq_length
        train_rows = [r for r in rows if r.get("split", "train") == "train"]
        train_blocks = pack(tokenizer, train_rows, length, seed=t.seed)
        eval_blocks = pack(tokenizer, [r for r in rows if r.get("split") == "eval"], length, -1)
        model = ctx.prepare(with_lora(base, config.lora), shard=t.fsdp)
        trainable = [p for p in model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(trainable, lr=t.learning_rate, weight_decay=t.weight_decay)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(t))

        def held_out() -> dict[str, float]:
            # before step 1: the base model's loss, or on resume the restored model's, which
            # must equal the loss logged at that step (resharded or not)
            val = evaluate(ctx, model, eval_blocks, t.per_device_batch_size)
            ctx.print(f"step {loop.global_step}/{t.max_steps} | eval loss {val:.6f}")
            return {"val_loss": val}

        loop = noderun.TrainingLoop(
            ctx,
            model,
            optimizer,
            scheduler,
            resume=config.resume or None,
            keep=t.keep_checkpoints,
            max_steps=t.max_steps,
            log_every=t.logging_steps,
            checkpoint_every=t.save_steps,
            checkpoint_min_sec=0,  # every save_steps checkpoint is written
            evaluate=held_out,
            eval_every=t.eval_steps,
        )
        ctx.print(
            f"fine-tuning {config.model.name_or_path} with LoRA r={config.lora.r} on "
            f"{ctx.world_size} ranks ({'FSDP2' if t.fsdp else 'DDP'}, {ctx.backend}, "
            f"{ctx.device}): {len(train_blocks)} train / {len(eval_blocks)} held-out blocks of "
            f"{length} tokens, {sum(p.numel() for p in trainable)} trainable parameters"
        )
        size, accum = t.per_device_batch_size, t.gradient_accumulation_steps
        batches = step_batches(
            Stream(train_blocks, t.seed), loop.state, ctx.rank, ctx.world_size, size, accum
        )
        with loop:  # the stream position is in loop.state: nothing to skip on resume
            for micro_batches in loop.iterate(batches, skip_trained=False):
                loss_sum = 0.0
                for m, (ids, labels) in enumerate(micro_batches):
                    with gradient_sync(model, m == accum - 1):
                        total, count = token_loss(model, ids.to(ctx.device), labels.to(ctx.device))
                        loss = total / count.clamp(min=1)
                        (loss / accum).backward()
                    loss_sum += float(loss.detach())
                lr = scheduler.get_last_lr()[0]
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad(set_to_none=True)
                samples = size * accum  # this rank's sequences of this step
                row = loop.end_step(samples, samples * length, train_loss=loss_sum / accum, lr=lr)
                if row is not None and "train_loss" in row:
                    ctx.print(
                        f"step {loop.global_step}/{t.max_steps} | loss {row['train_loss']:.4f} | "
                        f"lr {row['lr']:.3e} | {row['tokens_per_sec']:.0f} tokens/s"
                    )
        adapter = ctx.run_dir / "adapter"
        export_adapter(ctx, model, adapter)
        if config.export_merged and ctx.is_main:
            export_merged(location, adapter, ctx.run_dir / "merged")
        ctx.print(f"adapter written to {adapter}")


def main(argv: Sequence[str] | None = None) -> None:
    try:
        config, location = configure(argv)  # before any process group: mistakes cost nothing
    except settings.UsageError as err:
        # every rank of a node sees the same files: its local rank 0 says it, once per node
        err.agreed = os.environ.get("LOCAL_RANK", "0") != "0"  # type: ignore[attr-defined]
        raise
    train(config, location)


if __name__ == "__main__":
    from noderun import run_main

    sys.exit(run_main(main))
