"""``ctx.prepare``: DDP and FSDP2 (``shard=True``) as two choices of one call."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

import noderun
from noderun.runtime.context import shard_units
from tests.conftest import SCRIPTS, run_args
from tests.conftest import noderun as noderun_cli


def test_shard_units_are_the_blocks_of_the_outermost_module_lists() -> None:
    inner = nn.ModuleList([nn.Linear(2, 2)])
    block = nn.Sequential(nn.Linear(2, 2), inner)
    model = nn.Sequential(nn.Linear(2, 2), nn.Sequential(nn.ModuleList([block, nn.ReLU()])))
    assert list(shard_units(model)) == [block, model[1][0][1]]
    assert list(shard_units(nn.Linear(2, 2))) == []


def test_single_process_prepare_returns_the_module_on_its_device() -> None:
    with noderun.init(environ={}) as ctx:
        model = nn.Linear(3, 1)
        assert ctx.prepare(model, shard=True) is model
        assert ctx.prepare(model) is model
        assert next(model.parameters()).device == ctx.device


@pytest.mark.slow
def test_ddp_and_fsdp2_train_to_the_same_weights(tmp_path: Path) -> None:
    run_dir = tmp_path / "prepare"
    result = noderun_cli(run_args(SCRIPTS / "prepare_parity.py", run_dir), timeout=240)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = torch.load(run_dir / "prepare_result.pt", weights_only=True)
    assert out["world_size"] == 4 and out["ddp_wrapped"]
    # the three blocks of the ModuleList and the root are FSDP units
    assert out["fsdp_modules"] == ["", "layers.0", "layers.1", "layers.2"]
    assert set(out["local"]) == set(out["total"])  # every parameter is a DTensor
    for name, shape in out["total"].items():  # rank 0 holds its quarter of dim 0, no more
        assert out["local"][name] == -(-shape[0] // 4) * torch.Size(shape[1:]).numel(), name
    assert out["ddp"].keys() == out["fsdp"].keys()
    for key, value in out["ddp"].items():
        torch.testing.assert_close(out["fsdp"][key], value, rtol=1e-5, atol=1e-6, msg=key)
    assert not torch.equal(out["ddp"]["head.weight"], torch.zeros_like(out["ddp"]["head.weight"]))
