"""Argument checks every integration makes, written once.

Contract:

- Each check returns the value it accepted (normalised: a plain ``dict``, a ``float``) or
  raises ``TypeError`` for a value of the wrong type and ``ValueError`` for one out of range,
  before any request is made. Messages name the argument (``name=``).
- Adapters call these and, where their framework wants other wording or another exception
  type, wrap them; they do not write their own copy.
"""

from __future__ import annotations

import math
import posixpath
from collections.abc import Mapping
from importlib import metadata
from typing import cast

__all__ = [
    "check_absolute_path",
    "check_env",
    "check_positive_int",
    "check_seconds",
    "check_str_map",
    "package_version",
]


def check_str_map(value: object, *, name: str, env_names: bool = False) -> dict[str, str]:
    """``value`` as a ``str -> str`` dict (``None`` is empty): keys non-empty, no NUL anywhere.

    With ``env_names``, keys are environment variable names and must not contain ``=``.
    """
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise TypeError(f"{name} must be a mapping of str to str, not {type(value).__name__}")
    checked: dict[str, str] = {}
    for key, item in cast(Mapping[object, object], value).items():
        if not isinstance(key, str):
            raise TypeError(f"{name} keys must be str, not {type(key).__name__}")
        if not isinstance(item, str):
            raise TypeError(f"{name}[{key!r}] must be a str, not {type(item).__name__}")
        if not key:
            raise ValueError(f"{name} keys must not be empty")
        if "\0" in key or "\0" in item:
            raise ValueError(f"{name} keys and values must not contain NUL")
        if env_names and "=" in key:
            raise ValueError(f"{name}: environment variable names must not contain '=': {key!r}")
        checked[key] = item
    return checked


def check_env(value: object, *, name: str = "env") -> dict[str, str]:
    """Environment variables for one command or cell: :func:`check_str_map` with names."""
    return check_str_map(value, name=name, env_names=True)


def check_seconds(value: object, *, name: str = "timeout") -> float:
    """A positive, finite number of seconds, as a float (``bool`` is not a number here)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a number of seconds, not {type(value).__name__}")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a positive finite number of seconds, not {value!r}")
    return float(value)


def check_positive_int(value: object, *, name: str) -> int:
    """A positive ``int`` (a count or a size in bytes; ``bool`` is not a number here)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if value <= 0:
        raise ValueError(f"{name} must be positive, not {value}")
    return value


def check_absolute_path(value: object, *, name: str = "path") -> str:
    """An absolute POSIX path without NUL, returned as given (not normalised)."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, not {type(value).__name__}")
    if not posixpath.isabs(value) or "\0" in value:
        raise ValueError(f"{name} must be an absolute path without NUL: {value!r}")
    return value


def package_version(distribution: str) -> str:
    """The installed version of ``distribution``; ``0+unknown`` in a source tree not installed."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "0+unknown"
