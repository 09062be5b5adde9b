"""The base model and tokenizer from a local directory (Hugging Face or GGUF; nothing is
downloaded), with a LoRA adapter on the frozen base."""

from __future__ import annotations

import functools
import os
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
