"""LoRA fine-tuning of a causal LM, FSDP2-sharded across every rank (seed 001's job).

    python examples/llm/prepare_data.py --out data/pydoc_instructions.jsonl
    noderun run --nnodes 2 --nproc-per-node 2 examples/llm/finetune.py \\
        [--config examples/llm/config.yaml] [--training.max_steps 60] [--resume auto] …

Every config key is an option (``--section.key VALUE``). The config and every path it names
are checked before the process group starts. Rank 0 prints ``step / loss / lr / tokens/s``
lines and writes metrics.csv (a row per logged step); every ``eval_steps`` the held-out loss
is averaged over all ranks' shards of the held-out topics (step 0: the base model); every
``save_steps`` a sharded checkpoint (DCP: each rank its shard, optimizer, scheduler, step,
RNG) that resumes on any world size; at the end rank 0 writes the LoRA adapter
(``adapter/``: adapter_model.safetensors + adapter_config.json) and, with
``export_merged: true``, the merged model (``merged/``).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
import time
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

    model.eval()
    total = torch.zeros(2, dtype=torch.float64)
    with torch.no_grad():
        for ids, labels in eval_batches(blocks, ctx.rank, ctx.world_size, batch_size):
            loss, count = token_loss(model, ids.to(ctx.device), labels.to(ctx.device))
            total += torch.stack([loss.double().cpu(), count.double().cpu()])
    loss_sum, count = ctx.all_reduce_sum(total).tolist()
    model.train()
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
    from modeling import load_base, load_tokenizer
    from peft import PeftModel

    merged = PeftModel.from_pretrained(load_base(*location), adapter).merge_and_unload()
    merged.save_pretrained(out)
    load_tokenizer(*location).save_pretrained(out)


def micro_batches(
    stream: Any, consumed: int, rank: int, world: int, size: int, accum: int
) -> Iterator[tuple[bool, Any, Any]]:
    """(last?, ids, labels) of one optimizer step: micro-batch m of rank r is the stream's
    samples ``consumed + (m * world + r) * size`` onwards."""
    for micro in range(accum):
        ids, labels = stream.batch(consumed + (micro * world + rank) * size, size)
        yield micro == accum - 1, ids, labels


def train(config: settings.Config, location: tuple[Path, str | None]) -> None:
    import torch
    from instructions import Stream, pack, read_jsonl
    from modeling import load_base, load_tokenizer, with_lora

    import noderun
    from noderun import STEP_COLUMNS, Checkpointer, MetricsLogger, Position

    t = config.training
    with noderun.init(run_dir=config.output_dir or None) as ctx:
        torch.manual_seed(t.seed)
        tokenizer = load_tokenizer(*location)
        rows = read_jsonl(Path(config.data.dataset_path))
        length = config.data.max_seq_length
        train_rows = [r for r in rows if r.get("split", "train") == "train"]
        train_blocks = pack(tokenizer, train_rows, length, seed=t.seed)
        eval_blocks = pack(tokenizer, [r for r in rows if r.get("split") == "eval"], length, -1)
        model = ctx.prepare(with_lora(load_base(*location), config.lora), shard=t.fsdp)
        trainable = [p for p in model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(trainable, lr=t.learning_rate, weight_decay=t.weight_decay)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(t))
        ckpt = Checkpointer(ctx, model, optimizer, scheduler, keep=t.keep_checkpoints)
        start = ckpt.resume(config.resume or None)
        consumed = int(ckpt.extra.get("samples", 0))
        metrics = MetricsLogger(
            ctx.run_dir / "metrics.csv",
            ctx.is_main,
            columns=STEP_COLUMNS,
            resume_after_epoch=start.global_step,
        )
        step_tokens = t.per_device_batch_size * t.gradient_accumulation_steps * length
        ctx.print(
            f"fine-tuning {config.model.name_or_path} with LoRA r={config.lora.r} on "
            f"{ctx.world_size} ranks ({'FSDP2' if t.fsdp else 'DDP'}, {ctx.backend}, "
            f"{ctx.device}): {len(train_blocks)} train / {len(eval_blocks)} held-out blocks of "
            f"{length} tokens, {sum(p.numel() for p in trainable)} trainable parameters"
        )
        # step 0: the base model's held-out loss; on resume: the restored model's, which must
        # equal the loss logged at that step (resharded or not)
        val = evaluate(ctx, model, eval_blocks, t.per_device_batch_size)
        if start.global_step == 0:
            metrics.log(step=0, val_loss=val)
        what = "resumed" if start.global_step else "base model"
        ctx.print(f"step {start.global_step}/{t.max_steps} | eval loss {val:.6f} ({what})")
        stream = Stream(train_blocks, t.seed)
        model.train()
        for step in range(start.global_step + 1, t.max_steps + 1):
            began = time.perf_counter()
            loss_sum = 0.0
            for last, ids, labels in micro_batches(
                stream,
                consumed,
                ctx.rank,
                ctx.world_size,
                t.per_device_batch_size,
                t.gradient_accumulation_steps,
            ):
                with gradient_sync(model, last):
                    total, count = token_loss(model, ids.to(ctx.device), labels.to(ctx.device))
                    loss = total / count.clamp(min=1)
                    (loss / t.gradient_accumulation_steps).backward()
                loss_sum += float(loss.detach())
            consumed += t.per_device_batch_size * t.gradient_accumulation_steps * ctx.world_size
            lr = scheduler.get_last_lr()[0]
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            elapsed = time.perf_counter() - began
            row: dict[str, float] = {}
            if step % t.logging_steps == 0 or step == t.max_steps:
                loss_mean = ctx.all_reduce_mean(loss_sum / t.gradient_accumulation_steps)
                tokens_per_sec = step_tokens * ctx.world_size / elapsed
                row = {"train_loss": loss_mean, "lr": lr, "tokens_per_sec": tokens_per_sec}
                row["step_time_sec"] = elapsed
                ctx.print(
                    f"step {step}/{t.max_steps} | loss {loss_mean:.4f} | lr {lr:.3e} | "
                    f"{tokens_per_sec:.0f} tokens/s"
                )
            if step % t.eval_steps == 0 or step == t.max_steps:
                row["val_loss"] = evaluate(ctx, model, eval_blocks, t.per_device_batch_size)
                ctx.print(f"step {step}/{t.max_steps} | eval loss {row['val_loss']:.6f}")
            if row:
                metrics.log(step=step, **row)
            if step % t.save_steps == 0 or step == t.max_steps:
                ckpt.save(Position(global_step=step), {"samples": consumed})
        ckpt.wait()
        adapter = ctx.run_dir / "adapter"
        export_adapter(ctx, model, adapter)
        if config.export_merged and ctx.is_main:
            export_merged(location, adapter, ctx.run_dir / "merged")
        ctx.print(f"adapter written to {adapter}")
        metrics.close()


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
