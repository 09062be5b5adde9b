"""Bad input to `noderun explain`: binary, empty, huge, other encodings, a device, thousands of
rank logs. One line (exit 2) or a normal answer, bounded memory, never a traceback."""

from __future__ import annotations

import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import pytest

from noderun.explain import examine, scanner


def explain_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "noderun", "explain", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )


def _one_line(done: subprocess.CompletedProcess[str], words: str) -> None:
    assert done.returncode == 2, done
    assert done.stdout == "" and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and words in done.stderr


def test_an_empty_log_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "rank0.log").write_bytes(b"")
    _one_line(explain_cli(str(tmp_path / "rank0.log")), "is empty")


def test_a_device_or_fifo_is_one_line_and_never_blocks(tmp_path: Path) -> None:
    _one_line(explain_cli("/dev/null"), "is not a regular file")
    import os

    fifo = tmp_path / "pipe.log"
    os.mkfifo(fifo)
    _one_line(explain_cli(str(fifo)), "is not a regular file")


def test_a_binary_file_named_log_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "core.log"
    path.write_bytes(bytes(range(256)) * 64)
    _one_line(explain_cli(str(path)), "is a binary file")


def test_binary_files_in_a_directory_are_skipped(tmp_path: Path) -> None:
    (tmp_path / "core.log").write_bytes(b"\x7fELF\x00\x00" * 1000)
    (tmp_path / "rank1.log").write_text("torch.OutOfMemoryError: CUDA out of memory.\n")
    done = explain_cli(str(tmp_path))
    assert done.returncode == 1 and done.stdout.startswith("root cause: out-of-memory")


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be", "latin-1", "cp1252"])
def test_other_encodings_are_read(tmp_path: Path, encoding: str) -> None:
    text = "Schritt 1: Verlust 0,5 (café)\nRuntimeError: CUDA error: invalid device ordinal\n"
    data = text.encode(encoding)
    if encoding == "utf-16-be":
        data = b"\xfe\xff" + data  # with its byte order mark
    (tmp_path / "rank0.log").write_bytes(data)
    done = explain_cli(str(tmp_path / "rank0.log"))
    assert done.returncode == 1, done.stderr
    assert done.stdout.startswith("root cause: device-ordinal")
    assert "rank0.log:2" in done.stdout


def test_a_huge_log_without_newlines_stays_in_bounded_memory(tmp_path: Path) -> None:
    path = tmp_path / "one_line.log"
    with open(path, "wb") as handle:
        for _ in range(12):  # one line of 48 MB
            handle.write(b"x" * scanner.CHUNK)
        handle.write(b"\nMemoryError\n")
    tracemalloc.start()
    verdict = examine([str(path)])
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert verdict.failures[0].cause == "out-of-memory"
    assert verdict.failures[0].evidence.line == 2
    assert peak < 2 * scanner.MAX_LINE + 2 * scanner.CHUNK  # a cut line, not the 48 MB


def test_thousands_of_rank_logs_give_one_answer(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    for rank in range(3000):
        last = "FATAL: license server unavailable" if rank == 2718 else f"rank {rank} step 9"
        (logs / f"rank{rank}.log").write_text(f"rank {rank} step 1\n{last}\n")
    started = time.monotonic()
    done = explain_cli(str(tmp_path))
    took = time.monotonic() - started
    assert done.returncode == 1, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("root cause: unclassified")
    assert "rank2718.log:2" in lines[1]
    assert any("and 2984 more logs" in line for line in lines)  # 16 shown, not 3000
    assert len(lines) < 40
    assert took < 120, f"{took:.0f} s for 3000 small logs"


def test_an_unclassified_failure_prints_each_logs_last_line(tmp_path: Path) -> None:
    (tmp_path / "rank0.log").write_text("step 1\nFATAL: license server unavailable\nbye\n")
    (tmp_path / "rank1.log").write_text("step 1\nstep 2\n")
    done = explain_cli(str(tmp_path))
    assert done.returncode == 1
    out = done.stdout
    assert out.startswith("root cause: unclassified")
    assert "rank0.log:2" in out and "last line of each log:" in out
    assert "rank0.log:3: bye" in out and "rank1.log:2: step 2" in out
