"""FederatedSite pieces that need no FLARE server: the launch check and the weight broadcast."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from noderun.errors import NoderunError
from noderun.flare import client
from noderun.runtime.context import init
from tests.conftest import noderun, run_args


def test_bootstrap_variable_is_flares() -> None:
    from nvflare.client.cell.bootstrap import BOOTSTRAP_FILE_ENV_VAR

    assert client.FLARE_BOOTSTRAP_ENV == BOOTSTRAP_FILE_ENV_VAR


def test_outside_flare_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(client.FLARE_BOOTSTRAP_ENV, raising=False)
    ctx = init(run_dir=tmp_path, environ={})
    with pytest.raises(NoderunError) as err:
        client.FederatedSite(ctx)
    assert "not started by a FLARE client" in str(err.value) and "\n" not in str(err.value)


def test_unwrap_gives_the_module_whose_keys_flare_knows() -> None:
    inner = torch.nn.Linear(2, 2)

    class Wrapper(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.module = inner

    assert client.unwrap(Wrapper()) is inner
    assert client.unwrap(inner) is inner


@pytest.mark.slow
def test_broadcast_state_gives_every_rank_rank0s_weights(tmp_path: Path) -> None:
    script = Path(__file__).parent / "scripts" / "broadcast_weights.py"
    result = noderun(run_args(script, tmp_path / "run", nnodes=2, nproc=1))
    assert result.returncode == 0, result.stderr[-2000:]
    line = next(x for x in result.stdout.splitlines() if "SUMS " in x)
    found = json.loads(line.split("SUMS ", 1)[1])
    sums = found["ranks"]
    assert sums[0] == sums[1], sums  # float and int64 tensors alike
    assert sums[0][0] == found["rank0_seed0_weight"] and sums[0][-1] == 7.0, sums
