"""torchrun's rendezvous flags with names or addresses: --rdzv-endpoint and --master-addr
name node 0 by any of its names or addresses (IPv4 and IPv6, compared as addresses); anything
else is refused in one line naming both."""

from __future__ import annotations

import shlex
import socket
from pathlib import Path
from typing import Any

import psutil
import pytest

from noderun import cli
from noderun.backends import addresses
from noderun.errors import UsageError
from noderun.verbs.torchrun_flags import TorchrunFlags, _endpoint, endpoint_port
from tests.conftest import SCRIPTS

# a cluster's resolver: node 0 has a name, an IPv4 and an IPv6 address
HOSTS = {
    "gpu1": ["10.0.0.1", "fd00::1"],
    "gpu1.cluster": ["10.0.0.1"],
    "gpu2": ["10.0.0.2", "fd00::2"],
}


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    def resolve(name: str, *_: Any) -> list[tuple[Any, ...]]:
        if name not in HOSTS:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        family = {True: socket.AF_INET6, False: socket.AF_INET}
        return [(family[":" in a], socket.SOCK_STREAM, 6, "", (a, 0)) for a in HOSTS[name]]

    monkeypatch.setattr(addresses.socket, "getaddrinfo", resolve)


def _flags(text: str) -> TorchrunFlags:
    return TorchrunFlags(endpoint=_endpoint(text))


@pytest.mark.parametrize(
    "endpoint", ["gpu1:29500", "gpu1.cluster:29500", "10.0.0.1:29500", "[fd00::1]:29500"]
)
def test_node_0_by_any_name_or_address_is_node_0(cluster: None, endpoint: str) -> None:
    assert endpoint_port(_flags(endpoint), "gpu1", (), None) == 29500


@pytest.mark.parametrize("master_addr", ["gpu1", "10.0.0.1", "fd00::1", "::ffff:10.0.0.1"])
def test_master_addr_as_an_address_of_node_0(cluster: None, master_addr: str) -> None:
    assert endpoint_port(TorchrunFlags(), "gpu1", (), 29400, master_addr) == 29400


@pytest.mark.parametrize(
    ("endpoint", "shown"),
    [("gpu2:29500", "10.0.0.2, fd00::2"), ("[fd00::2]:29500", "fd00::2")],
)
def test_another_node_is_refused_naming_both(cluster: None, endpoint: str, shown: str) -> None:
    with pytest.raises(UsageError) as refused:
        endpoint_port(_flags(endpoint), "gpu1", (), None)
    said = str(refused.value)
    assert f"--rdzv-endpoint {endpoint.replace('[', '').replace(']', '')} ({shown}) is " in said
    assert "is not node 0 (gpu1: 10.0.0.1, fd00::1)" in said and "\n" not in said
    with pytest.raises(UsageError, match=r"--master-addr 10.0.0.2 \(10.0.0.2\) is not node 0"):
        endpoint_port(TorchrunFlags(), "gpu1", (), None, "10.0.0.2")
    with pytest.raises(UsageError, match="nowhere does not resolve here"):
        endpoint_port(_flags("nowhere:1"), "gpu1", (), None)


def _own_address() -> str | None:
    """One of this machine's non-loopback interface addresses (IPv4 first)."""
    found = [
        a.address
        for nic in psutil.net_if_addrs().values()
        for a in nic
        if a.family in (socket.AF_INET, socket.AF_INET6)
    ]
    usable = [a for a in found if not any(x.is_loopback for x in addresses.addresses(a))]
    return sorted(usable, key=lambda a: ":" in a)[0].split("%")[0] if usable else None


def test_locally_this_machines_own_addresses_are_node_0() -> None:
    local = ("localhost", "127.0.0.1", socket.gethostname())
    for host in ("127.0.0.1", "::1", "localhost", socket.gethostname()):
        assert endpoint_port(_flags(f"[{host}]:29511"), "127.0.0.1", local, None) == 29511
    own = _own_address()
    if own is not None:  # a machine with a network interface
        assert endpoint_port(_flags(f"[{own}]:29512"), "127.0.0.1", local, None) == 29512
    with pytest.raises(UsageError, match=r"192.0.2.7:29500 \(192.0.2.7\) is not node 0"):
        endpoint_port(_flags("192.0.2.7:29500"), "127.0.0.1", local, None)


def test_run_takes_this_machines_address_as_the_endpoint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """pytorch/examples' sbatch passes ``hostname --ip-address``: noderun run takes it."""
    monkeypatch.chdir(tmp_path)
    own = _own_address() or "127.0.0.1"
    port = 29513
    code = cli.main(
        ["run", "--dry-run", "--nproc-per-node", "1", "--rdzv_endpoint", f"[{own}]:{port}",
         "--rdzv_id", "exp-7", str(SCRIPTS / "plain_torch.py")]
    )  # fmt: skip
    assert code == 0, capsys.readouterr().err
    [agent] = [
        shlex.split(line) for line in capsys.readouterr().out.splitlines() if "torch." in line
    ]
    assert f"--master-port={port}" in agent and "--rdzv-id=exp-7" in agent


def test_a_node_started_by_hand_finds_node_0_through_the_endpoint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """torchrun's hand-started habit: every machine gets --rdzv-endpoint NODE0:PORT."""
    monkeypatch.chdir(tmp_path)
    script = str(SCRIPTS / "plain_torch.py")
    by_hand = ["run", "--dry-run", "--nnodes", "2", "--node-rank", "1", "--nproc-per-node", "1"]
    assert cli.main([*by_hand, "--rdzv_endpoint", "127.0.0.1:29534", script]) == 0
    [entry] = [shlex.split(s) for s in capsys.readouterr().out.splitlines() if "noderun.node" in s]
    assert "--master-addr=127.0.0.1" in entry and "--master-port=29534" in entry
    both = ["--master-addr", "localhost", "--rdzv-endpoint", "127.0.0.1:29534", script]
    assert cli.main([*by_hand, *both]) == 0  # the same node, by a name and an address
    capsys.readouterr()
    other = ["--master-addr", "192.0.2.7", "--rdzv-endpoint", "127.0.0.1:29534", script]
    assert cli.main([*by_hand, *other]) == 2
    err = capsys.readouterr().err
    assert "--master-addr 192.0.2.7 (192.0.2.7) and --rdzv-endpoint 127.0.0.1:29534" in err
    assert len(err.strip().splitlines()) == 1
