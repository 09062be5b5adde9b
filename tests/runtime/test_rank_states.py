"""The payload of a rank's checkpoint state: what goes into the gather slot comes back equal."""

from __future__ import annotations

import pickle

import torch

from noderun.runtime import rank_states, rng


def test_rng_states_and_extras_round_trip_with_dtype_and_shape() -> None:
    obj = {
        "rng": rng.capture(),
        "extra": {"seen": 17, "loss": 0.25, "w": torch.arange(6.0).reshape(2, 3).t()},
        "half": torch.ones(3, dtype=torch.bfloat16),  # no numpy dtype: torch's own pickling
        "grad": torch.nn.Parameter(torch.ones(2)),
    }
    back = pickle.loads(rank_states._dumps(obj))
    for name in ("torch",):
        assert torch.equal(back["rng"][name], obj["rng"][name])
        assert back["rng"][name].dtype == torch.uint8
    assert torch.equal(back["rng"]["python"][1], obj["rng"]["python"][1])
    assert torch.equal(back["extra"]["w"], obj["extra"]["w"])  # a transposed view
    assert back["extra"]["seen"] == 17
    assert back["half"].dtype == torch.bfloat16 and torch.equal(back["half"], obj["half"])
    assert isinstance(back["grad"], torch.nn.Parameter)


def test_the_restored_rng_state_draws_what_the_captured_one_would() -> None:
    state = pickle.loads(rank_states._dumps(rng.capture()))
    expected = torch.rand(3)
    rng.restore(state)
    assert torch.equal(torch.rand(3), expected)
