"""The check-in gate refuses participants started with other options (srun runs one command
line on every node, but `--nproc-per-node gpu` or a per-node variable can still differ): every
participant hears it and exits 2, before torch starts. Real sockets on this machine."""

from __future__ import annotations

import threading

import pytest

from noderun.backends.node_gate import GateRefusal, NodeGate
from noderun.backends.ports import free_port


def _gate(index: int, port: int, terms: str, total: int = 3) -> NodeGate:
    return NodeGate(
        index=index,
        total=total,
        addr="127.0.0.1",
        port=port,
        host=f"node{index + 1}",
        join_timeout=10,
        describe=lambda i: f"node {i} (node{i + 1})",
        terms=terms,
    )


def _run_all(terms: list[str]) -> dict[int, BaseException | None]:
    port = free_port()
    outcome: dict[int, BaseException | None] = {}

    def one(index: int) -> None:
        try:
            _gate(index, port, terms[index], len(terms)).wait()
            outcome[index] = None
        except BaseException as err:  # the test looks at every participant's
            outcome[index] = err

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(terms))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    return outcome


def test_same_terms_pass() -> None:
    same = "--nproc-per-node=2 --mode=torchrun"
    assert _run_all([same, same, same]) == {0: None, 1: None, 2: None}


def test_other_terms_are_refused_on_every_node_with_both_named() -> None:
    outcome = _run_all(["--nproc-per-node=2", "--nproc-per-node=4", "--nproc-per-node=2"])
    for index in range(3):
        err = outcome[index]
        assert isinstance(err, GateRefusal), (index, err)
        assert err.exit_code == 2
        assert "node 1 (node2) was started with `--nproc-per-node=4`" in str(err)
        assert "node 0 (node1) with `--nproc-per-node=2`" in str(err)


def test_refusal_is_a_usage_error() -> None:
    with pytest.raises(GateRefusal):
        raise GateRefusal("x", "y")
