import pytest

from noderun.errors import TopologyError
from noderun.topology import expand_hostlist, port_for_job, tasks_per_node
from noderun.topology.hostlist import compress_hostlist


@pytest.mark.parametrize(
    ("text", "hosts"),
    [
        ("node[1-2]", ["node1", "node2"]),
        ("node1", ["node1"]),
        (
            "gpu-a[001-004,010],gpu-b7",
            ["gpu-a001", "gpu-a002", "gpu-a003", "gpu-a004", "gpu-a010", "gpu-b7"],
        ),
        ("r[1-2]n[01-02]", ["r1n01", "r1n02", "r2n01", "r2n02"]),
        ("a,b,c", ["a", "b", "c"]),
        ("", []),
    ],
)
def test_expand_hostlist(text: str, hosts: list[str]) -> None:
    assert expand_hostlist(text) == hosts


@pytest.mark.parametrize("bad", ["node[1-2", "node[x]", "node[5-3]"])
def test_bad_hostlists_are_errors(bad: str) -> None:
    with pytest.raises(TopologyError):
        expand_hostlist(bad)


def test_tasks_per_node() -> None:
    assert tasks_per_node("2(x3),1") == [2, 2, 2, 1]
    assert tasks_per_node("4") == [4]
    with pytest.raises(TopologyError):
        tasks_per_node("two")


def test_port_for_job_differs_between_jobs_and_is_stable() -> None:
    assert port_for_job("101") == port_for_job(101)
    assert port_for_job(101) != port_for_job(102)
    assert all(1024 < port_for_job(j) < 65536 for j in (0, 1, 19999, 20000, 123456789))


@pytest.mark.parametrize(
    "hosts",
    [
        ["node1"],
        ["node2", "node1", "node1"],
        ["gpu-a001", "gpu-a002", "gpu-a004", "gpu-b7", "login"],
        ["n9", "n10", "n11", "n13"],
    ],
)
def test_compress_hostlist_expands_back_to_the_same_hosts(hosts: list[str]) -> None:
    short = compress_hostlist(hosts)
    assert sorted(expand_hostlist(short)) == sorted(set(hosts))
    assert len(short) <= len(",".join(sorted(set(hosts))))


def test_compress_hostlist_writes_ranges_as_slurm_does() -> None:
    assert compress_hostlist(["node2", "node1", "node3"]) == "node[1-3]"
    assert compress_hostlist(["gpu07", "gpu09", "gpu08", "gpu11"]) == "gpu[07-09,11]"
