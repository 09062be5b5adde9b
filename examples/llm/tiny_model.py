"""A tiny randomly initialized Llama (SmolLM2's architecture and tokenizer, a few thousand
times smaller) saved as a Hugging Face directory: for tests and benchmarks, no weights loaded.

    python examples/llm/tiny_model.py OUT_DIR [--layers 2] [--hidden 64]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from modeling import load_tokenizer
from settings import PACKAGED_MODEL, ModelConfig, model_location
from transformers import LlamaConfig, LlamaForCausalLM


def write(out: Path, layers: int = 2, hidden: int = 64, seed: int = 0) -> Path:
    tokenizer = load_tokenizer(*model_location(ModelConfig(PACKAGED_MODEL, "")))
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    LlamaForCausalLM(config).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--hidden", type=int, default=64)
    args = parser.parse_args()
    print(write(args.out, args.layers, args.hidden))
    sys.exit(0)
