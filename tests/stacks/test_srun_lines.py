"""A stack record crosses ``srun --label`` whole, however deep the stack and long its paths
(srun cuts an output line at 1024 bytes: the fresh clone's longer venv path broke it)."""

from __future__ import annotations

import json
import os

import pytest

from noderun.backends.slurm_text import parse_labelled
from noderun.srun_lines import read_marked, write_marked
from noderun.stacks.node import MARKER


def _as_srun_prints(text: str, task: int) -> str:
    """What ``srun --label`` makes of a task's output: ``task: `` before every 1024-byte cut."""
    lines = []
    for line in text.splitlines():
        lines += [f"{task}: {line[i : i + 1024]}" for i in range(0, max(len(line), 1), 1024)]
    return "\n".join(lines)


def test_a_deep_stack_with_long_paths_is_read_back_whole(capfd: pytest.CaptureFixture[str]) -> None:
    venv = "/home/someone/miniconda3/envs/a-rather-long-environment-name/lib/python3.11"
    frames = [
        {"function": f"frame_{i}", "file": f"{venv}/site-packages/torch/x{i}.py", "line": i}
        for i in range(20)
    ]
    record = {"stack": {"rank": 3, "frames": frames}, "run_dir": "/tmp/run"}
    assert len(json.dumps(record)) > 2 * 1024
    write_marked(MARKER, json.dumps({"note": "py-spy missing"}))
    write_marked(MARKER, json.dumps(record))
    printed = _as_srun_prints(capfd.readouterr().out, task=1)
    lines = parse_labelled(printed)
    assert {task for task, _ in lines} == {1}
    values = read_marked("\n".join(text for _, text in lines), MARKER)
    assert values == [{"note": "py-spy missing"}, record]


def test_the_old_one_line_record_would_have_been_cut() -> None:
    long_line = json.dumps({"stack": {"frames": ["x" * 2000]}}) + os.linesep
    cut = [text for _, text in parse_labelled(_as_srun_prints(long_line, task=0))]
    assert len(cut) > 1
    with pytest.raises(ValueError):
        json.loads(cut[0])
