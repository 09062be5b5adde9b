"""The link rounds of the collective test: every pair up to 5 nodes, flat time beyond."""

from __future__ import annotations

import itertools

import pytest

from noderun.doctor.collective import MAX_SHIFTS, bus_factor, ring_shifts


def _pairs(nodes: int) -> set[frozenset[int]]:
    return {frozenset((i, (i + s) % nodes)) for s in ring_shifts(nodes) for i in range(nodes)}


@pytest.mark.parametrize("nodes", [2, 3, 4, 5])
def test_every_pair_is_measured_up_to_five_nodes(nodes: int) -> None:
    everything = {frozenset(p) for p in itertools.combinations(range(nodes), 2)}
    assert _pairs(nodes) == everything


@pytest.mark.parametrize("nodes", [6, 16, 256])
def test_rounds_stay_flat_and_each_node_keeps_its_links(nodes: int) -> None:
    assert len(ring_shifts(nodes)) == MAX_SHIFTS
    pairs = _pairs(nodes)
    for node in range(nodes):  # a slow node shows on 2 * MAX_SHIFTS of its links
        assert sum(node in pair for pair in pairs) == 2 * MAX_SHIFTS


def test_one_node_has_no_links_and_bus_factor_follows_nccl_tests() -> None:
    assert list(ring_shifts(1)) == []
    assert bus_factor(1) == 1.0 and bus_factor(2) == 1.0 and bus_factor(4) == 1.5
