"""Instruction data from the Python reference documentation that ships with the interpreter
(``pydoc_data.topics``), and its tokenization into packed blocks.

Records: every topic is split at its reStructuredText headings into sections, every section
into chunks of whole paragraphs (at most ``CHUNK_CHARS`` characters). A chunk becomes
``{"instruction": "Explain <section> in Python.", "response": <chunk>}`` (later chunks of a
section ask to continue it). Held out for evaluation: whole topics, every ``EVAL_EVERY``-th
topic in sorted order starting at ``EVAL_OFFSET`` (none of their text is trained on).

Tokens: each record is rendered with the model's chat template (user = instruction, assistant
= response); the loss covers the assistant's tokens only (prompt tokens labelled -100).
Records are concatenated (train in a seeded shuffle, eval in order) and cut into blocks of
``max_seq_length`` tokens: packing, so no step computes on padding. A record cut at a block
boundary continues in the next block; attention spans the records of one block.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from noderun import UsageError

CHUNK_CHARS = 1200
EVAL_EVERY = 8
EVAL_OFFSET = 3
IGNORE = -100
_UNDERLINE = re.compile(r"^([*=\-~^\"'`#+])\1{2,}$")


def sections(text: str) -> Iterator[tuple[str, str]]:
    """``(heading, body)`` of a reference topic, split at underlined headings."""
    lines = text.splitlines()
    heading, body = "", []
    i = 0
    while i < len(lines):
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        if lines[i].strip() and _UNDERLINE.match(nxt.strip()) and len(nxt.strip()) >= 3:
            if body and "".join(body).strip():
                yield heading, "\n".join(body).strip()
            heading, body = lines[i].strip(), []
            i += 2
            continue
        body.append(lines[i])
        i += 1
    if "".join(body).strip():
        yield heading, "\n".join(body).strip()


def chunks(body: str, limit: int = CHUNK_CHARS) -> Iterator[str]:
    """Whole paragraphs, joined up to ``limit`` characters (a longer paragraph stands alone)."""
    current: list[str] = []
    size = 0
    for paragraph in re.split(r"\n\s*\n", body):
        paragraph = paragraph.rstrip()
        if not paragraph.strip():
            continue
        if current and size + len(paragraph) > limit:
            yield "\n\n".join(current)
            current, size = [], 0
        current.append(paragraph)
        size += len(paragraph) + 2
    if current:
        yield "\n\n".join(current)


def eval_topics(topics: Sequence[str]) -> list[str]:
    return [t for i, t in enumerate(sorted(topics)) if i % EVAL_EVERY == EVAL_OFFSET]


def records(topics: Mapping[str, str]) -> list[dict[str, str]]:
    """Every topic's instruction records, topics in sorted order, each tagged with its split."""
    held_out = set(eval_topics(list(topics)))
    out = []
    for topic in sorted(topics):
        for heading, body in sections(topics[topic]):
            subject = heading or topic
            for part, chunk in enumerate(chunks(body)):
                instruction = (
                    f"Explain {subject} in Python."
                    if part == 0
                    else f"Continue the explanation of {subject} in Python (part {part + 1})."
                )
                out.append(
                    {
                        "instruction": instruction,
                        "response": chunk,
                        "topic": topic,
                        "split": "eval" if topic in held_out else "train",
                    }
                )
    return out


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    rows = []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise UsageError(f"{path} line {number} is not JSON ({err.msg})", "") from None
            if not isinstance(row, dict) or not {"instruction", "response"} <= set(row):
                raise UsageError(
                    f"{path} line {number} has no instruction/response",
                    "write records as prepare_data.py does",
                )
            rows.append(row)
    return rows


def encode(tokenizer: Any, record: Mapping[str, str]) -> tuple[list[int], list[int]]:
    """(token ids, labels) of one record in the chat template; prompt tokens labelled -100."""
    messages = [{"role": "user", "content": record["instruction"]}]
    prompt = _ids(tokenizer.apply_chat_template(messages, add_generation_prompt=True))
    full = _ids(
        tokenizer.apply_chat_template(
            [*messages, {"role": "assistant", "content": record["response"]}]
        )
    )
    if full[: len(prompt)] != prompt:  # a template that rewrites the prompt: train on all of it
        return full, list(full)
    return full, [IGNORE] * len(prompt) + full[len(prompt) :]


def _ids(rendered: Any) -> list[int]:
    ids = rendered["input_ids"] if isinstance(rendered, Mapping) else rendered
    return [int(i) for i in ids]


@dataclass(frozen=True)
class Blocks:
    """Packed blocks: ``input_ids`` and ``labels``, both ``[n, max_seq_length]``."""

    input_ids: torch.Tensor
    labels: torch.Tensor

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])


def pack(tokenizer: Any, rows: Sequence[Mapping[str, str]], length: int, seed: int) -> Blocks:
    """Records (shuffled with ``seed`` unless it is negative) concatenated and cut into blocks of
    ``length`` tokens; the tail shorter than a block is dropped."""
    order = list(range(len(rows)))
    if seed >= 0:
        random.Random(seed).shuffle(order)
    ids: list[int] = []
    labels: list[int] = []
    for index in order:
        i, lab = encode(tokenizer, rows[index])
        ids += i
        labels += lab
    n = len(ids) // length
    if n == 0:
        raise UsageError(
            f"{len(rows)} records make {len(ids)} tokens, fewer than one block of {length}",
            "lower data.max_seq_length or give more data",
        )
    shape = (n, length)
    return Blocks(
        torch.tensor(ids[: n * length]).view(shape), torch.tensor(labels[: n * length]).view(shape)
    )


class Stream:
    """An endless, world-size independent stream of training blocks: sample ``o`` of the stream
    is block ``perm_p[o % n]`` of pass ``p = o // n`` (a fresh seeded permutation per pass).
    A step takes the next ``global batch`` samples; each rank its slice of them, so a run
    resumed on another world size continues the same stream where it stopped."""

    def __init__(self, blocks: Blocks, seed: int) -> None:
        self.blocks = blocks
        self.seed = seed
        self._perm: tuple[int, torch.Tensor] | None = None

    def _index(self, offset: int) -> int:
        n = len(self.blocks)
        epoch = offset // n
        if self._perm is None or self._perm[0] != epoch:
            generator = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
            self._perm = (epoch, torch.randperm(n, generator=generator))
        return int(self._perm[1][offset % n])

    def batch(self, start: int, size: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Samples ``start .. start+size`` of the stream as (input_ids, labels)."""
        index = torch.tensor([self._index(o) for o in range(start, start + size)])
        return self.blocks.input_ids[index], self.blocks.labels[index]


def eval_batches(
    blocks: Blocks, rank: int, world: int, size: int
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """This rank's share of the held-out blocks (``rank::world``), in batches; every rank gets
    the same number of batches (sharded models run collectives in forward), the missing ones
    all labelled -100 so they add nothing to the loss."""
    mine = list(range(rank, len(blocks), world))
    per_rank = -(-len(blocks) // world)
    for start in range(0, per_rank, size):
        index = mine[start : start + size]
        if index:
            yield blocks.input_ids[index], blocks.labels[index]
        else:
            yield blocks.input_ids[:1], torch.full_like(blocks.labels[:1], IGNORE)
