"""The one atomic write: readers see the old or the new file, never half of one."""

from __future__ import annotations

from pathlib import Path

import pytest

from noderun import atomic


@pytest.mark.parametrize("durable", [True, False])
def test_replaces_the_file_and_leaves_no_temporary(tmp_path: Path, durable: bool) -> None:
    target = tmp_path / "sub" / "run.json"
    atomic.write_text(target, "old", durable=durable)
    atomic.write_text(str(target), "new", durable=durable)
    assert target.read_text() == "new"
    assert sorted(p.name for p in target.parent.iterdir()) == ["run.json"]


def test_a_failed_write_keeps_the_old_file_and_removes_the_temporary(tmp_path: Path) -> None:
    target = tmp_path / "run.json"
    atomic.write_text(target, "old")

    with pytest.raises(TypeError):  # fails after the temporary file was opened
        atomic.write_bytes(target, "not bytes")  # type: ignore[arg-type]
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["run.json"]
