"""The base model and tokenizer from a local directory (Hugging Face or GGUF; nothing is
downloaded), with a LoRA adapter on the frozen base."""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a run never reaches for the network
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")

import warnings

import torch
from peft import LoraConfig as PeftLoraConfig
from peft import get_peft_model
from settings import LoraConfig
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.utils import logging as hf_logging

hf_logging.disable_progress_bar()  # rank logs stay free of progress bars
# peft asks transformers a deprecated question on every call; not the user's concern
warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)


def load_pretrained(directory: Path, gguf_file: str | None) -> tuple[Any, torch.nn.Module]:
    """(tokenizer, causal LM in float32): ``load_tokenizer`` and ``load_base`` with a GGUF file
    parsed once for both (see ``gguf_parsed_once``)."""
    with gguf_parsed_once(gguf_file is not None):
        return load_tokenizer(directory, gguf_file), load_base(directory, gguf_file)


@contextlib.contextmanager
def gguf_parsed_once(enabled: bool = True) -> Iterator[None]:
    """transformers reads a GGUF file three times (the tokenizer, the config, the weights; each
    parse a few CPU-seconds for SmolLM2's 49k-token vocabulary and merges) and rebuilds gguf's
    tensor-name table once per tensor (~400 times). Inside this block each file is parsed once
    and each table built once: the same tokenizer and weights, in a third of the CPU time
    (SmolLM2-135M: ~14 -> ~5 CPU-s a rank). Both are read-only to transformers; the memo goes
    with the block."""
    if not enabled:
        yield
        return
    import gguf

    reader, name_map = gguf.GGUFReader, gguf.get_tensor_name_map
    readers: dict[tuple[str, str], Any] = {}

    def read_once(path: Any, mode: str = "r") -> Any:
        key = (os.path.realpath(path), mode)
        if key not in readers:
            readers[key] = reader(path, mode)
        return readers[key]

    gguf.GGUFReader = read_once  # transformers imports both from gguf at each call
    gguf.get_tensor_name_map = functools.cache(name_map)
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = reader, name_map


def load_tokenizer(directory: Path, gguf_file: str | None) -> Any:
    tokenizer = AutoTokenizer.from_pretrained(directory, gguf_file=gguf_file, local_files_only=True)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_base(directory: Path, gguf_file: str | None) -> torch.nn.Module:
    """The causal LM in float32 (a GGUF file is dequantized on load)."""
    if gguf_file:  # its dequantization bar is a bare tqdm, deaf to disable_progress_bar()
        import transformers.modeling_gguf_pytorch_utils as gguf_utils

        gguf_utils.tqdm = functools.partial(gguf_utils.tqdm, disable=True)
    model = AutoModelForCausalLM.from_pretrained(
        directory, gguf_file=gguf_file, local_files_only=True, dtype=torch.float32
    )
    model.config.use_cache = False  # training: no key/value cache
    return model


def with_lora(base: torch.nn.Module, lora: LoraConfig) -> torch.nn.Module:
    """``base`` frozen, LoRA matrices on ``lora.target_modules`` trainable (peft)."""
    config = PeftLoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=list(lora.target_modules),
        task_type="CAUSAL_LM",
    )
    return get_peft_model(base, config)
