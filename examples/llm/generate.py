"""One question, answered by the base model and by the base model with a trained adapter
(greedy decoding, plain process, no process group).

    python examples/llm/generate.py RUN_DIR/adapter [--question TEXT] [--tokens 80]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from modeling import load_pretrained
from peft import PeftModel
from settings import PACKAGED_MODEL, ModelConfig, model_location


def answer(model: torch.nn.Module, tokenizer: object, question: str, tokens: int) -> str:
    messages = [{"role": "user", "content": question}]
    ids = tokenizer.apply_chat_template(  # type: ignore[attr-defined]
        messages, add_generation_prompt=True, return_tensors="pt", return_dict=True
    )["input_ids"]
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=tokens, do_sample=False)  # type: ignore[operator]
    return str(tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True))  # type: ignore[attr-defined]


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("adapter", type=Path)
    parser.add_argument("--model", default=PACKAGED_MODEL, help="model.name_or_path of the run")
    parser.add_argument("--question", default='Explain The "try" statement in Python.')
    parser.add_argument("--tokens", type=int, default=80)
    args = parser.parse_args()
    location = model_location(ModelConfig(args.model, ""))
    tokenizer, base = load_pretrained(*location)
    base.eval()
    print(
        f"Q: {args.question}\n\nbase model:\n{answer(base, tokenizer, args.question, args.tokens)}"
    )
    tuned = PeftModel.from_pretrained(base, args.adapter).eval()
    print(f"\nwith the adapter:\n{answer(tuned, tokenizer, args.question, args.tokens)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
