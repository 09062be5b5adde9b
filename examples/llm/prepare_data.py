"""Write the instruction JSONL from the Python reference documentation in the standard library.

    python examples/llm/prepare_data.py [--out data/pydoc_instructions.jsonl]

Deterministic: the same Python version writes the same bytes. How records are made and which
topics are held out is documented in instructions.py; the summary line says how many.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from pydoc_data.topics import topics

from instructions import eval_topics, records


def write(out: Path) -> Counter[str]:
    rows = records(topics)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    with open(tmp, "w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n")
    tmp.replace(out)
    return Counter(row["split"] for row in rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("data/pydoc_instructions.jsonl"))
    args = parser.parse_args()
    counts = write(args.out)
    held = eval_topics(list(topics))
    print(
        f"{args.out}: {counts['train']} train / {counts['eval']} eval records from "
        f"{len(topics)} topics of Python {sys.version.split()[0]}; held out: {', '.join(held)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
