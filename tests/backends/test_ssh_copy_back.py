"""Merging a host's run directory (a tar, as `backends.ssh.copy_back` receives it) into the
run directory here: the host's files replace older copies, noderun's own files stay, the
timeline gains only new lines."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

from noderun.backends.ssh import merge_file


def _tar(files: dict[str, bytes]) -> io.BytesIO:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    buffer.seek(0)
    return buffer


def _merge_all(files: dict[str, bytes], run_dir: Path) -> int:
    with tarfile.open(fileobj=_tar(files), mode="r|") as tar:
        return sum(merge_file(tar, member, run_dir) for member in tar)


def test_host_files_replace_old_copies_and_noderuns_own_stay(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    (tmp_path / "run.json").write_text("here")
    (tmp_path / "logs" / "rank1.log").write_text("streamed")
    (tmp_path / "metrics.csv").write_text("epoch\n1\n")  # an earlier attempt's copy
    (tmp_path / "logs" / "timeline.jsonl").write_bytes(b'{"a": 1}\n')
    written = _merge_all(
        {
            "./run.json": b"host",
            "./logs/rank1.log": b"host",
            "./metrics.csv": b"epoch\n1\n2\n",
            "./checkpoints/epoch-0002/.complete": b"",
            "./logs/timeline.jsonl": b'{"a": 1}\n{"b": 2}\n',
            "../escape": b"x",
            "/etc/evil": b"x",
        },
        tmp_path,
    )
    assert written == 3
    assert (tmp_path / "run.json").read_text() == "here"
    assert (tmp_path / "logs" / "rank1.log").read_text() == "streamed"
    assert (tmp_path / "metrics.csv").read_text() == "epoch\n1\n2\n"
    assert (tmp_path / "checkpoints" / "epoch-0002" / ".complete").is_file()
    assert (tmp_path / "logs" / "timeline.jsonl").read_bytes() == b'{"a": 1}\n{"b": 2}\n'
    assert not (tmp_path.parent / "escape").exists()
