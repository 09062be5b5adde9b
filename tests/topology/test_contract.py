"""The launcher -> rank contract: its own names, a round trip, the old names as a fallback."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from noderun.plan.launch import RANK_ENTRY
from noderun.topology.contract import VARIABLES, RankContract

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.mark.parametrize(
    "contract",
    [
        RankContract(),
        RankContract(run_dir="/runs/a b", node_rank=1, join_timeout=2.5),
        RankContract(run_dir="/r", node_rank=0, join_timeout=30.0, restart_count=0, max_restarts=3),
    ],
)
def test_round_trip(contract: RankContract) -> None:
    env = contract.to_env()
    assert all(name.startswith("NODERUN__") for name in env)
    assert RankContract.from_env(env) == contract


def test_contract_names_cannot_be_option_variables() -> None:
    # an option's variable is NODERUN_ + a flag name, which starts with a letter
    assert all(ours.startswith("NODERUN__") for ours, *_ in VARIABLES.values())
    assert RankContract(run_dir="/r").to_env() == {"NODERUN__RUN_DIR": "/r"}


def test_old_names_are_read_when_the_contract_is_absent() -> None:
    # a rank captured under an older noderun run (tests/topology/fixtures)
    captured = json.loads((FIXTURES / "torchrun_2x2_rank3.json").read_text())
    assert RankContract.from_env(captured) == RankContract(run_dir="/tmp/t/cap", node_rank=1)
    both = {"NODERUN_RUN_DIR": "/user", "NODERUN__RUN_DIR": "/launcher"}
    assert RankContract.from_env(both).run_dir == "/launcher"


def test_unreadable_values_are_unset() -> None:
    env = {"NODERUN__NODE_RANK": "x", "NODERUN__JOIN_TIMEOUT": "soon", "NODERUN__RUN_DIR": ""}
    assert RankContract.from_env(env) == RankContract()
    assert RankContract.variable({"NODERUN_JOIN_TIMEOUT": "3"}, "join_timeout") == (
        "NODERUN_JOIN_TIMEOUT"
    )
    assert RankContract.variable({}, "join_timeout") == "NODERUN__JOIN_TIMEOUT"


def test_rank_entry_reads_the_same_names() -> None:
    # rank_entry.py is stdlib-only and started by path: it keeps its own copy of the names
    spec = importlib.util.spec_from_file_location("rank_entry_names", RANK_ENTRY)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert VARIABLES["run_dir"] == module.RUN_DIR_VARIABLES
    assert set(module.RESTART_VARIABLES) == {VARIABLES["restart_count"], VARIABLES["max_restarts"]}
