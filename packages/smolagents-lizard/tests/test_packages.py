"""What smolagents asks to install becomes safe pip requirements, checked in one cell."""

from __future__ import annotations

import pytest

from smolagents_lizard._packages import (
    missing_check_code,
    module_name,
    parse_missing,
    requirements,
)


def test_module_names_become_distributions() -> None:
    names = ["PIL", "numpy.linalg", "*", "os", "json", "sklearn", "emoji==2.15.0", "numpy"]
    assert requirements(names) == ["pillow", "numpy", "scikit-learn", "emoji==2.15.0"]


@pytest.mark.parametrize(
    "bad", ["--index-url=https://evil", "-e .", "pkg; rm -rf /", "a b", "git+https://x/y.git"]
)
def test_pip_options_and_urls_are_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="not a package name"):
        requirements([bad])


def test_non_strings_are_refused() -> None:
    with pytest.raises(TypeError):
        requirements([3])  # type: ignore[list-item]


def test_module_name_only_for_bare_names() -> None:
    assert module_name("pillow") == "PIL"
    assert module_name("typing-extensions") == "typing_extensions"
    assert module_name("emoji==2.15.0") is None
    assert module_name("requests[socks]") is None


def test_check_cell_reports_what_is_missing_here() -> None:
    reqs = ["pillow", "surely-not-installed-pkg", "emoji==2.15.0"]
    value = eval(missing_check_code(reqs))  # the cell is one expression; run it on the host
    assert value == ["surely-not-installed-pkg", "emoji==2.15.0"]
    assert parse_missing(repr(value), reqs) == value


def test_unreadable_check_result_means_install_everything() -> None:
    assert parse_missing("Traceback ...", ["a", "b"]) == ["a", "b"]
    assert parse_missing("['c']", ["a", "b"]) == ["a", "b"]
