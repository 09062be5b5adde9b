"""``--profile`` / NODERUN_PROFILE text: what it selects, and one-line refusals."""

from __future__ import annotations

import pytest

from noderun.plan.profile import ProfileSpec, parse_profile


@pytest.mark.parametrize(
    ("text", "spec"),
    [
        ("steps=5:10,ranks=0,1", ProfileSpec(5, 10, (0, 1), True)),
        ("ranks=all,steps=2:3", ProfileSpec(2, 3, None, True)),
        ("steps=7,trace=0", ProfileSpec(7, 7, (0,), False)),
        ("on", ProfileSpec()),
        ("ranks=3,1,3", ProfileSpec(ranks=(1, 3))),
    ],
)
def test_specs_read_as_written(text: str, spec: ProfileSpec) -> None:
    assert parse_profile(text) == spec
    assert parse_profile(spec.text()) == spec


@pytest.mark.parametrize("text", ["", "off", "0"])
def test_off_is_none(text: str) -> None:
    assert parse_profile(text) is None


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("steps=10:5", "before the first"),
        ("steps=0:3", "at least 1"),
        ("steps=a:3", "not a whole number"),
        ("ranks=-1", "at least 0"),
        ("5:10", "not key=value"),
        ("window=3", "keys are"),
        ("trace=maybe", "keys are"),
    ],
)
def test_mistakes_say_what_is_wrong(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        parse_profile(text)


def test_window_and_ranks() -> None:
    spec = ProfileSpec(3, 5, (1,))
    assert [s for s in range(1, 9) if spec.covers(s)] == [3, 4, 5]
    assert spec.selects(1) and not spec.selects(0)
    assert ProfileSpec(ranks=None).selects(99)
