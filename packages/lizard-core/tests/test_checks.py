from __future__ import annotations

import math

import pytest

from lizard_core.checks import (
    check_absolute_path,
    check_env,
    check_seconds,
    check_str_map,
    package_version,
)


def test_env_maps_are_plain_dicts_of_names_without_equals_or_nul() -> None:
    assert check_env(None) == {}
    assert check_env({"A": "1"}) == {"A": "1"}
    with pytest.raises(TypeError, match="env must be a mapping"):
        check_env([("A", "1")])
    with pytest.raises(TypeError, match="keys must be str"):
        check_env({1: "x"})
    with pytest.raises(TypeError, match=r"env\['A'\] must be a str"):
        check_env({"A": 1})
    with pytest.raises(ValueError, match="environment variable names"):
        check_env({"A=B": "x"}, name="envs")
    for bad in ({"": "x"}, {"A": "\0"}, {"A\0": "x"}):
        with pytest.raises(ValueError, match="env"):
            check_env(bad)


def test_plain_string_maps_may_hold_equals_signs() -> None:
    assert check_str_map({"a=b": "c"}, name="metadata") == {"a=b": "c"}


@pytest.mark.parametrize("bad", [0, -1, math.inf, math.nan])
def test_seconds_must_be_positive_and_finite(bad: float) -> None:
    with pytest.raises(ValueError, match="timeout"):
        check_seconds(bad)


@pytest.mark.parametrize("bad", [True, "5", None])
def test_seconds_must_be_numbers(bad: object) -> None:
    with pytest.raises(TypeError, match="grace"):
        check_seconds(bad, name="grace")


def test_seconds_come_back_as_floats() -> None:
    assert check_seconds(2) == 2.0
    assert isinstance(check_seconds(2), float)


def test_paths_must_be_absolute_strings_without_nul() -> None:
    assert check_absolute_path("/a/../b") == "/a/../b"
    with pytest.raises(TypeError):
        check_absolute_path(b"/a")
    for bad in ("a/b", "", "/a\0b"):
        with pytest.raises(ValueError, match="cwd"):
            check_absolute_path(bad, name="cwd")


def test_package_version_of_an_installed_and_a_missing_distribution() -> None:
    assert package_version("lizard-core") != "0+unknown"
    assert package_version("no-such-distribution-here") == "0+unknown"


def test_counts_must_be_positive_ints() -> None:
    from lizard_core.checks import check_positive_int

    assert check_positive_int(3, name="limit") == 3
    for bad in (True, 1.5, "3", None):
        with pytest.raises(TypeError, match="limit must be an int"):
            check_positive_int(bad, name="limit")
    for bad in (0, -1):
        with pytest.raises(ValueError, match="limit must be positive"):
            check_positive_int(bad, name="limit")
