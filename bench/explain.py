"""Throughput of `noderun explain` on a generated log with the failure near the end, against
`grep -E -n` with the same patterns (the whole signature table), in the same run.

The log is written to a temporary file (default 1 GB) and deleted afterwards. Prints every
repetition, the medians, explain's peak RSS on the big log and on a tiny one (constant memory
means they are close), and the throughput ratio last.

    .venv/bin/python bench/explain.py [--size-mb 1024] [--reps 3]
"""

from __future__ import annotations

import argparse
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from noderun.explain.signatures import SIGNATURES

TARGET = 0.5
NOISE = (
    "[2026-11-22 10:20:{s:02d},{ms:03d}] INFO train.py:88 epoch 3 step {i} loss=0.{r} lr=3e-4 "
    "throughput=1234.5 samples/s",
    "[rank{k}]:[W1122 10:20:{s:02d}.{ms:03d}000 ProcessGroupGloo.cpp:{r}] Warning: slow "
    "collective at step {i}",
    "0:0| epoch 3/12 train_loss=0.{r} val_loss=0.0751 val_accuracy=0.9833 (0.47 s, 3056 samples/s)",
    "/usr/lib/python3/site-packages/torch/utils/data/dataloader.py:{r}: UserWarning: This "
    "DataLoader will create 4 worker processes in total",
    "NCCL INFO Channel 00/02 :    0   1   2   3 via P2P/IPC comm {r} rank {k}",
)
FAILURE = (
    "[rank3]: Traceback (most recent call last):\n"
    '[rank3]:   File "train.py", line 41, in <module>\n'
    "[rank3]: RuntimeError: CUDA error: invalid device ordinal\n"
)


def generate(path: Path, size: int) -> None:
    """``size`` bytes of realistic noise, the failure at 99 %, a little noise after it."""
    rng = random.Random(0)
    block = "".join(
        NOISE[rng.randrange(len(NOISE))].format(
            i=i, r=rng.randrange(100000), k=rng.randrange(8), s=i % 60, ms=i % 1000
        )
        + "\n"
        for i in range(20000)
    ).encode()
    with open(path, "wb") as handle:
        written = 0
        while written < size * 0.99:
            handle.write(block)
            written += len(block)
        handle.write(FAILURE.encode())
        while written < size:
            handle.write(block[: 1 << 20])
            written += 1 << 20


def grep_pattern(pattern: str) -> str:
    """The same regular expression in GNU grep's ERE: ``\\d`` -> [0-9], ``(?:`` -> ``(``,
    ``(?i:x)`` -> letters as [xX] classes."""

    def insensitive(match: re.Match[str]) -> str:
        return (
            "(" + re.sub(r"[A-Za-z]", lambda c: f"[{c[0].lower()}{c[0].upper()}]", match[1]) + ")"
        )

    pattern = re.sub(r"\(\?i:((?:[^()]|\([^()]*\))*)\)", insensitive, pattern)
    # \b inside a [..] class would break; the table keeps \b outside classes
    return pattern.replace("(?:", "(").replace(r"\d", "[0-9]")


def timed(argv: list[str]) -> tuple[float, int, str]:
    """Wall seconds, peak RSS in MB (from wait4 of this very child), stdout."""
    start = time.perf_counter()
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
        elapsed = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        text = out.read().decode(errors="replace")
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{argv[0]} failed ({proc.returncode}): {text[-500:]}")
    return elapsed, usage.ru_maxrss // 1024, text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=1024, help="log size (default 1 GB)")
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="noderun-bench-explain-"))
    log, tiny, patterns = workdir / "big.log", workdir / "tiny.log", workdir / "patterns.txt"
    try:
        started = time.perf_counter()
        generate(log, args.size_mb << 20)
        tiny.write_text(FAILURE)
        patterns.write_text("\n".join(grep_pattern(s.pattern) for s in SIGNATURES) + "\n")
        size_mb = log.stat().st_size / (1 << 20)
        print(
            f"log: {size_mb:.0f} MB generated in {time.perf_counter() - started:.1f} s; "
            f"{len(SIGNATURES)} patterns; LANG={os.environ.get('LANG', '')!r}"
        )
        explain = [sys.executable, "-m", "noderun", "explain", "--json"]
        grep = ["grep", "-E", "-n", "-f", str(patterns), str(log)]
        times: dict[str, list[float]] = {"explain": [], "grep": []}
        rss = 0
        for rep in range(1, args.reps + 1):
            t_explain, rss, out = timed([*explain, str(log)])
            assert '"device-ordinal"' in out, out[:500]
            t_grep, _, out = timed(grep)
            assert "invalid device ordinal" in out
            times["explain"].append(t_explain)
            times["grep"].append(t_grep)
            print(
                f"rep {rep}: explain {t_explain:.2f} s ({size_mb / t_explain:.0f} MB/s), "
                f"grep -E {t_grep:.2f} s ({size_mb / t_grep:.0f} MB/s)"
            )
        _, rss_tiny, _ = timed([*explain, str(tiny)])
        med_e, med_g = statistics.median(times["explain"]), statistics.median(times["grep"])
        print(f"median: explain {size_mb / med_e:.0f} MB/s, grep -E {size_mb / med_g:.0f} MB/s")
        print(f"explain peak RSS: {rss} MB on {size_mb:.0f} MB, {rss_tiny} MB on a 3-line log")
        ratio = med_g / med_e
        print(f"ratio explain/grep throughput = {ratio:.2f} (target >= {TARGET})")
    finally:
        for path in (log, tiny, patterns):
            path.unlink(missing_ok=True)
        workdir.rmdir()
    return 0


if __name__ == "__main__":
    sys.exit(main())
