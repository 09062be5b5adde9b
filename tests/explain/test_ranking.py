"""Ranking and streaming rules of the scanner, on small logs written by the tests."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest

from noderun.explain import explain, scanner
from noderun.explain.scanner import Scanner

FIXTURES = Path(__file__).parent / "fixtures"


def write(path: Path, *lines: str) -> str:
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_warnings_and_noise_after_the_root_cause_are_not_the_cause(tmp_path):
    log = write(
        tmp_path / "job.log",
        "[W1122 10:00:00.000 socket.cpp:1] [c10d] connect failed (errno: 111 - Connection refused)",
        "UserWarning: this DataLoader will create 4 worker processes",
        "[rank1]: RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB",
        "[rank0]: RuntimeError: [gloo] Connection closed by peer [10.0.0.2]:4312",
        "[E1122 10:00:09.000 ProcessGroupNCCL.cpp:1] Watchdog caught collective operation timeout",
    )
    causes = [f.cause for f in explain([log])]
    # the retry warning came first in time but is weak; the collective timeout came after
    assert causes == ["out-of-memory", "collective-timeout", "rank-crashed", "connection-refused"]


def test_first_failure_in_time_across_files(tmp_path):
    late = write(tmp_path / "a.log", "2026-11-22 10:00:09,000 RuntimeError: CUDA out of memory.")
    early = write(tmp_path / "b.log", "2026-11-22 10:00:01,000 bind: Address already in use")
    findings = explain([late, early])
    assert [f.cause for f in findings] == ["port-in-use", "out-of-memory"]
    assert findings[0].evidence.file == early


def test_an_unstamped_line_takes_the_time_of_the_record_before_it(tmp_path):
    first = write(
        tmp_path / "a.log",
        "[E1122 10:00:05.000 x.cpp:1] step failed",
        "Traceback (most recent call last):",
        "ValueError: bad shape",
    )
    second = write(tmp_path / "b.log", "[E1122 10:00:03.000 x.cpp:1] Address already in use")
    assert [f.cause for f in explain([first, second])] == ["port-in-use", "rank-crashed"]


def test_generic_error_words_are_reported_as_unknown_only_alone(tmp_path):
    log = write(tmp_path / "x.log", "starting", "FATAL: license server unavailable", "done")
    (finding,) = explain([log])
    assert finding.cause == "unknown" and finding.evidence.line == 2
    both = write(tmp_path / "y.log", "FATAL: license server unavailable", "MemoryError")
    assert [f.cause for f in explain([both])] == ["out-of-memory"]


def test_clean_log_has_no_finding(tmp_path):
    assert explain([write(tmp_path / "ok.log", "epoch 1 loss 0.3", "done")]) == []


def test_failed_run_without_known_lines_is_unknown_with_run_json_evidence(tmp_path):
    run = tmp_path / "run"
    (run / "logs").mkdir(parents=True)
    (run / "logs" / "rank0.log").write_text("epoch 1\n")
    (run / "run.json").write_text('{"status": "failed", "exit_code": 3}')
    (finding,) = explain([str(run)])
    assert finding.cause == "unknown"
    assert finding.evidence.file.endswith("run.json") and "exit code 3" in finding.evidence.text


def test_line_numbers_survive_chunk_boundaries_and_a_last_line_without_newline(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(scanner, "CHUNK", 64)
    lines = [f"line {i} fine" for i in range(1, 200)]
    lines[120] = "RuntimeError: CUDA error: invalid device ordinal"
    path = tmp_path / "x.log"
    path.write_text("\n".join([*lines, "bind: Address already in use"]))  # no final newline
    hits = list(Scanner().scan(path))
    assert [(h.line, h.signature.cause) for h in hits] == [
        (121, "device-ordinal"),
        (200, "port-in-use"),
    ]


def test_a_line_longer_than_the_limit_is_cut_not_buffered(tmp_path, monkeypatch):
    monkeypatch.setattr(scanner, "CHUNK", 1024)
    monkeypatch.setattr(scanner, "MAX_LINE", 4096)
    path = tmp_path / "x.log"
    path.write_bytes(b"x" * 20000 + b" Address already in use\nnext MemoryError\n")
    hits = list(Scanner().scan(path))
    assert [h.signature.cause for h in hits] == ["port-in-use", "out-of-memory"]
    assert hits[-1].line == 2


def test_memory_stays_constant_on_a_large_log(tmp_path):
    path = tmp_path / "big.log"
    noise = b"[2026-11-22 10:00:00,000] INFO step 123 loss=0.1234 lr=3e-4 ok\n" * 20000
    with open(path, "wb") as handle:
        for _ in range(40):  # ~50 MB
            handle.write(noise)
        handle.write(b"[rank3]: RuntimeError: CUDA error: invalid device ordinal\n")
    tracemalloc.start()
    findings = explain([str(path)])
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert findings[0].cause == "device-ordinal" and findings[0].evidence.line == 800001
    assert peak < 4 * scanner.CHUNK  # a chunk and its carry, not the 50 MB file


@pytest.mark.parametrize("engine", ["re", "re2"])
def test_both_engines_rank_the_same(engine):
    findings = explain([str(FIXTURES / "run_oom")], Scanner(engine=engine))
    assert [f.cause for f in findings] == ["out-of-memory", "rank-crashed"]
