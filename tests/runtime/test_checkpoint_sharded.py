"""Sharded checkpoints: FSDP2 on 2 nodes x 1 process (CPU/gloo), every rank writes its shard,
``checkpoint.load`` gathers the full model, and a resumed model trains to identical weights."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from noderun import checkpoint
from tests.conftest import SCRIPTS, noderun

pytestmark = pytest.mark.slow
TWO_NODES = ["run", "--nnodes", "2", "--nproc-per-node", "1"]


def test_fsdp_sharded_save_gathered_load_and_exact_resume(tmp_path: Path) -> None:
    run_dir = tmp_path / "fsdp"
    result = noderun(
        [*TWO_NODES, "--run-dir", str(run_dir), str(SCRIPTS / "fsdp_checkpoint.py")],
        timeout=240,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    outcome = torch.load(run_dir / "fsdp_result.pt", weights_only=True)
    path = Path(outcome["path"])
    assert path == run_dir / "checkpoints" / "epoch-0000-step-000003"
    assert checkpoint.is_complete(path)
    assert json.loads((path / "meta.json").read_text())["format"] == "sharded"
    assert len(list((path / "shards").glob("*.distcp"))) == 2  # one shard file per rank

    state = checkpoint.load(path)  # no process group here: gathered from the shards
    assert state["model"].keys() == outcome["at_save"].keys()
    for key, value in outcome["at_save"].items():
        assert state["model"][key].shape == value.shape  # full, not a shard
        assert torch.equal(state["model"][key], value), key
    assert state["extra"] == [{"note": "sharded"}, {"note": "sharded"}]
    assert state["optimizer"]["state"]  # AdamW moments came back too

    for key, value in outcome["a"].items():
        assert torch.equal(value, outcome["b"][key]), f"{key}: resumed differs"
    assert not all(torch.equal(v, outcome["at_save"][k]) for k, v in outcome["a"].items())
