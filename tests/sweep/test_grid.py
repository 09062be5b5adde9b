"""The sweep's grid, pure: --param parsing, expansion, substitution, point names."""

from __future__ import annotations

import pytest

from noderun.sweep.grid import Param, ParamError, Point, expand, parse_param, point_args


def test_params_expand_to_their_product_first_param_slowest() -> None:
    points = expand([parse_param("lr=1e-3,3e-4"), parse_param("batch=32,64")])
    assert [p.name for p in points] == [
        "lr=1e-3,batch=32",
        "lr=1e-3,batch=64",
        "lr=3e-4,batch=32",
        "lr=3e-4,batch=64",
    ]
    assert [p.index for p in points] == [0, 1, 2, 3]
    assert points[2].as_dict() == {"lr": "3e-4", "batch": "32"}


def test_values_are_appended_or_substituted_where_the_arguments_name_them() -> None:
    point = Point((("lr", "0.1"), ("batch", "32")))
    assert point_args(["--epochs", "2"], point) == ["--epochs", "2", "--lr", "0.1", "--batch", "32"]
    assert point_args(["--bs={batch}", "out-{batch}-{lr}"], point) == ["--bs=32", "out-32-0.1"]


def test_a_name_is_stable_and_safe_for_a_directory() -> None:
    point = Point((("opt", "adam/w"), ("tag", "a b")))
    assert point.name == "opt=adam_w,tag=a_b"
    assert point.name == expand([Param("opt", ("adam/w",)), Param("tag", ("a b",))])[0].name


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("lr", "no '='"),
        ("lr=", "empty value"),
        ("lr=1,,2", "empty value"),
        ("1lr=1", "not an identifier"),
        ("l r=1", "not an identifier"),
        ("lr=1,1", "repeats a value"),
    ],
)
def test_malformed_params_name_the_problem(text: str, words: str) -> None:
    with pytest.raises(ParamError, match=words) as caught:
        parse_param(text)
    assert "--param" in caught.value.hint or "value" in caught.value.hint


def test_a_grid_needs_a_param_and_each_name_once() -> None:
    with pytest.raises(ParamError, match="at least one"):
        expand([])
    with pytest.raises(ParamError, match="given twice"):
        expand([parse_param("lr=1"), parse_param("lr=2")])
