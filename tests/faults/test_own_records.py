"""The launcher never ends in a traceback because of an I/O error on its own records: one line
naming the file (not its temporary name) and the errno, exit 1."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from noderun import atomic, cli, rundir
from noderun.verbs import verify


def test_an_os_error_of_a_verb_is_one_line_naming_the_file(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    def full(*_: object) -> int:
        rundir.write_json_atomic(tmp_path / "run.json", {"status": "completed"})
        return 0

    def no_room(self: object, *_: object) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(verify, "main", full)
    monkeypatch.setattr(atomic.Path, "replace", no_room)
    code = cli.main(["verify", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 1
    assert err == (
        f"noderun: error: {tmp_path / 'run.json'}: [Errno 28] No space left on device; "
        "hint: free space on that filesystem or fix its permissions\n"
    )
    assert not list(tmp_path.glob(".run.json.tmp*"))  # nothing half-written left behind
