"""Doctor on nodes started by hand: facts go to node 0 and come back whole to every node; a
node that never reports is named; bad flags are one line."""

from __future__ import annotations

import threading

from noderun.backends.ports import free_port
from noderun.doctor import exchange
from tests.conftest import noderun


def test_every_reporting_node_gets_every_nodes_facts_and_the_absent_are_left_out() -> None:
    port = free_port()
    listener = exchange.listen(port)
    got: dict[int, dict] = {}
    reporter = threading.Thread(
        target=lambda: got.update(exchange.report("127.0.0.1", port, 1, {"host": "b"}, 30)),
    )
    reporter.start()  # before node 0 gathers: its report waits in the backlog
    with listener:
        gathered = exchange.gather(listener, 3, {"host": "a"}, wait=1.5)  # node 2 never comes
    reporter.join(timeout=30)
    assert gathered == {0: {"host": "a"}, 1: {"host": "b"}}
    assert got == gathered


def test_a_node_whose_master_never_answers_keeps_its_own_facts() -> None:
    alone = exchange.report("127.0.0.1", free_port(), 1, {"host": "b"}, wait=0.5)
    assert alone == {1: {"host": "b"}}


def test_a_hand_started_doctor_without_its_flags_is_one_line() -> None:
    for args in (["--node-rank", "0"], ["--nnodes", "2", "--node-rank", "2", "--master-addr", "x"]):
        done = noderun(["doctor", *args])
        assert done.returncode == 2, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and "hint:" in lines[0], lines
