"""NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME read by each library's own rule, form by form."""

from __future__ import annotations

import pytest

from noderun.check_result import Status
from noderun.doctor import checks
from noderun.doctor.ifname import gloo_selects, nccl_selects
from tests.doctor.test_checks import facts

# (setting, routed interface, selected?) -- NCCL: ^ then = for the whole list, else prefixes
NCCL = [
    ("eth", "eth0", True),  # prefix
    ("eth", "ens5", False),
    ("eth,ib", "ib0", True),  # comma list of prefixes
    ("eth,ib", "enp1s0", False),
    ("=eth0", "eth0", True),  # exact
    ("=eth", "eth0", False),  # exact: a prefix is not enough
    ("=eth0,eth1", "eth1", True),  # = applies to the whole list
    ("=eth0,eth1", "eth10", False),
    ("^docker,lo", "eth0", True),  # seed 003's value: exclude docker*/lo*
    ("^docker,lo", "docker0", False),
    ("^docker,lo", "lo", False),
    ("^lo", "eth0", True),
    ("^=docker0", "docker0", False),  # exclude exactly docker0 ...
    ("^=docker0", "docker01", True),  # ... not what merely starts with it
    ("eth0:29500", "eth0", True),  # a port suffix names no interface
    ("", "eth0", False),
]


@pytest.mark.parametrize(("setting", "iface", "selected"), NCCL)
def test_nccl_socket_ifname_forms(setting: str, iface: str, selected: bool) -> None:
    verdict = nccl_selects(setting, iface)
    assert verdict.selected is selected, verdict.reason
    assert verdict.reason


GLOO = [
    ("eth0", "eth0", True),
    ("eth0,eth1", "eth1", True),  # comma list of names
    ("eth", "eth0", False),  # no prefixes in gloo
    ("eth1,eth2", "eth0", False),
    ("^docker,lo", "eth0", False),  # NCCL syntax means nothing to gloo
    ("=eth0", "eth0", False),
]


@pytest.mark.parametrize(("setting", "iface", "selected"), GLOO)
def test_gloo_socket_ifname_forms(setting: str, iface: str, selected: bool) -> None:
    assert gloo_selects(setting, iface).selected is selected


def _interface(env: dict[str, str], interfaces: list[str] | None = None) -> checks.Check:
    node = facts(env=env, interfaces=interfaces or ["lo", "eth0", "docker0"])
    return checks.check_interface(node, [node])


@pytest.mark.parametrize(
    "env",
    [
        {"NCCL_SOCKET_IFNAME": "^docker,lo"},
        {"NCCL_SOCKET_IFNAME": "=eth0", "GLOO_SOCKET_IFNAME": "eth0"},
        {"NCCL_SOCKET_IFNAME": "eth", "GLOO_SOCKET_IFNAME": "eth0,docker0"},
    ],
)
def test_doctor_passes_settings_that_select_the_routed_interface(env: dict[str, str]) -> None:
    check = _interface(env)  # the master is routed via eth0
    assert check.status is Status.PASS, check.detail


@pytest.mark.parametrize(
    ("env", "words"),
    [
        ({"NCCL_SOCKET_IFNAME": "^eth,lo"}, "eth0 is excluded"),
        ({"NCCL_SOCKET_IFNAME": "=eth"}, "matches none of the exact names eth"),
        ({"GLOO_SOCKET_IFNAME": "^docker,lo"}, "NCCL's syntax"),
        ({"GLOO_SOCKET_IFNAME": "eth"}, "eth0 is not among eth"),
        ({"GLOO_SOCKET_IFNAME": "eth0,ib0"}, "no interface ib0 here"),
    ],
)
def test_doctor_fails_settings_that_miss_the_routed_interface(
    env: dict[str, str], words: str
) -> None:
    check = _interface(env)
    assert check.status is Status.FAIL
    assert words in check.detail and "routed via eth0" in check.detail
    assert check.fix == "export NCCL_SOCKET_IFNAME=eth0 GLOO_SOCKET_IFNAME=eth0"
