"""What watching and taking stacks cost a running rank.

- pause: a target process spins in a Python loop and records every gap between iterations;
  the longest gap inside a ``py-spy dump`` (or a faulthandler SIGUSR2 dump) is how long the
  rank stood still. Baseline: the longest gap in windows of the same length without a dump,
  interleaved in the same run (scheduler jitter on a shared machine).
- watch: CPU time of one stall-watcher poll (4 live rank processes, their progress counters,
  metrics.csv), as a share of a core at one poll per second.
- beat: the runtime's step counter, ns per step, against the same loop without it.

    .venv/bin/python bench/stacks.py [--dumps 15]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

TARGET_MS = 50.0
TARGET = textwrap.dedent(
    """
    import faulthandler, json, signal, sys, time
    faulthandler.register(signal.SIGUSR2, file=open(sys.argv[2], "w"), all_threads=True)
    gaps, prev, end = [], time.perf_counter(), time.perf_counter() + float(sys.argv[1])
    print("ready", flush=True)
    while prev < end:
        now = time.perf_counter()
        if now - prev > 0.0005:
            gaps.append((time.time() - (time.perf_counter() - now), now - prev))
        prev = now
    print(json.dumps(gaps), flush=True)
    """
)


def longest_gap(gaps: list[tuple[float, float]], start: float, end: float) -> float:
    """Longest recorded gap that ended inside [start, end] (seconds; 0 if none)."""
    return max((g for t, g in gaps if start <= t <= end + 0.05), default=0.0)


def pauses(dumps: int, how: str) -> tuple[list[float], list[float]]:
    """(pause per dump, baseline per equal window) in ms."""
    with tempfile.TemporaryDirectory() as tmp:
        duration = dumps * 0.6 + 2
        target = subprocess.Popen(
            [sys.executable, "-c", TARGET, str(duration), f"{tmp}/fh.txt"],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert target.stdout is not None and target.stdout.readline().strip() == "ready"
        windows, quiet = [], []
        py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
        for _ in range(dumps):
            time.sleep(0.2)
            start = time.time()
            if how == "py-spy":
                subprocess.run([py_spy, "dump", "--pid", str(target.pid)], capture_output=True)
            else:
                size = os.path.getsize(f"{tmp}/fh.txt")
                os.kill(target.pid, signal.SIGUSR2)
                while os.path.getsize(f"{tmp}/fh.txt") == size:
                    time.sleep(0.001)
            end = time.time()
            windows.append((start, end))
            time.sleep(0.2)
            quiet.append((time.time(), time.time() + (end - start)))
            time.sleep(end - start)
        gaps = json.loads(target.communicate()[0].splitlines()[-1])
    return (
        [1000 * longest_gap(gaps, s, e) for s, e in windows],
        [1000 * longest_gap(gaps, s, e) for s, e in quiet],
    )


def watch_cost(polls: int = 200) -> float:
    """CPU seconds of one stall-watcher poll over 4 live ranks."""
    from noderun.backends.stall import StallWatcher
    from noderun.plan.stall import StallPolicy
    from noderun.stacks.files import COUNTER, progress_file

    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp)
        (run_dir / "logs").mkdir()
        (run_dir / "metrics.csv").write_text("epoch\n")
        for rank in range(4):
            progress_file(run_dir, rank).write_bytes(COUNTER.pack(rank))
        ranks = [
            subprocess.Popen(
                [sys.executable, "-c", "import time; time.sleep(60)"],
                env={**os.environ, "RANK": str(r), "NODERUN_RUN_DIR": str(run_dir)},
            )
            for r in range(4)
        ]
        try:
            watcher = StallWatcher(StallPolicy(300), run_dir, world_size=4)
            watcher._roots = (os.getpid(),)
            watcher._moved()  # the first poll finds the ranks
            began = time.process_time()
            for _ in range(polls):
                watcher._moved()
            cost = (time.process_time() - began) / polls
            assert len(watcher._ranks) == 4
        finally:
            for proc in ranks:
                proc.kill()
                proc.wait()
    return cost


def beat_cost(steps: int = 2_000_000) -> tuple[float, float]:
    """ns per loop step with and without the step counter."""
    from noderun.runtime import heartbeat

    with tempfile.TemporaryDirectory() as tmp:
        heartbeat.install(0, {"NODERUN_RUN_DIR": tmp})
        best = {"bare": float("inf"), "beat": float("inf")}
        for _ in range(5):
            began = time.perf_counter()
            for _ in range(steps):
                pass
            best["bare"] = min(best["bare"], time.perf_counter() - began)
            began = time.perf_counter()
            for _ in range(steps):
                heartbeat.beat()
            best["beat"] = min(best["beat"], time.perf_counter() - began)
    return 1e9 * best["bare"] / steps, 1e9 * best["beat"] / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dumps", type=int, default=15)
    args = parser.parse_args()
    spy, spy_base = pauses(args.dumps, "py-spy")
    fault, fault_base = pauses(args.dumps, "faulthandler")
    print(f"py-spy dump pause, {args.dumps} dumps: median {statistics.median(spy):.1f} ms, "
          f"max {max(spy):.1f} ms; same-length windows without a dump: median "
          f"{statistics.median(spy_base):.1f} ms, max {max(spy_base):.1f} ms")  # fmt: skip
    print(f"faulthandler dump pause, {args.dumps} dumps: median {statistics.median(fault):.1f} "
          f"ms, max {max(fault):.1f} ms; without a dump: median "
          f"{statistics.median(fault_base):.1f} ms, max {max(fault_base):.1f} ms")  # fmt: skip
    cost = watch_cost()
    print(f"stall watcher: {1e6 * cost:.0f} us CPU per poll over 4 ranks = "
          f"{100 * cost:.3f}% of a core at one poll per second")  # fmt: skip
    bare, beat = beat_cost()
    print(f"step counter: {beat - bare:.0f} ns per step ({bare:.0f} ns empty loop step)")
    median = statistics.median(spy)
    print(f"py-spy dump pause per rank, median = {median:.1f} ms (target <= {TARGET_MS:g} ms)")


if __name__ == "__main__":
    main()
