"""Damaged sharded checkpoints: one line, never torch's multi-rank traceback (unit lane)."""

from __future__ import annotations

import errno
import warnings
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp

from noderun.errors import UsageError
from noderun.runtime import checkpoint, sharded


def test_a_damaged_shard_is_one_line_not_dcps_traceback(tmp_path: Path) -> None:
    """torch's CheckpointException is a BaseException: ``except Exception`` let it through as
    a multi-rank traceback; a gathered load of a damaged shard is one line naming the folder."""
    torch.save({"epoch": 1}, tmp_path / checkpoint.TRAINER_FILE)
    with warnings.catch_warnings():  # "no process group": one process saves it all
        warnings.simplefilter("ignore", UserWarning)
        dcp.save(
            {"model": {"w": torch.ones(3)}}, checkpoint_id=str(tmp_path / checkpoint.SHARDS_DIR)
        )
    assert sharded.load_full(tmp_path)["model"]["w"].tolist() == [1.0, 1.0, 1.0]
    for shard in (tmp_path / checkpoint.SHARDS_DIR).glob("*.distcp"):
        shard.write_bytes(b"not a shard")
    with pytest.raises(UsageError, match=r"is corrupt \(") as err:
        sharded.load_full(tmp_path)
    assert "\n" not in err.value.problem and "Traceback" not in err.value.problem
    assert "resume from an earlier checkpoint" in err.value.hint


def test_a_full_disk_under_dcp_reaches_the_write_error_handling_as_its_oserror(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DCP wraps a rank's ENOSPC in its CheckpointException (a BaseException, which the
    checkpointer's ``except Exception`` missed): the save raises the OSError it wraps, so a
    full disk under a sharded model is the same one-line write error as under DDP."""
    from types import SimpleNamespace

    from torch.distributed.checkpoint.api import CheckpointException

    def full_disk(*_: object, **__: object) -> None:
        raise CheckpointException("save", {0: (OSError(errno.ENOSPC, "No space left"), None)})

    monkeypatch.setattr(sharded, "dcp_save", full_disk)
    ctx = SimpleNamespace(is_main=True, barrier=lambda: None)
    with pytest.raises(OSError) as raised:
        sharded.save(ctx, torch.nn.Linear(2, 2), None, {}, tmp_path, "epoch-0001", {}, 2, None)  # type: ignore[arg-type]
    assert raised.value.errno == errno.ENOSPC
