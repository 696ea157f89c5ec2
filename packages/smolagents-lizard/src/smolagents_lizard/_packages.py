"""Which packages a step needs, and which of them the sandbox lacks.

Contract:
- ``requirements(names)`` turns what smolagents hands an executor (``additional_imports``, tool
  requirements: module names such as ``PIL``, ``numpy.linalg`` or ``*``, or pip requirements such as
  ``emoji==2.15.0``) into pip requirements: ``*`` and standard-library modules are dropped, a
  submodule becomes its top-level package, and the few modules whose distribution has another name
  are mapped (``PIL`` -> ``pillow``). Anything that could be read as a pip option is refused with
  ``ValueError`` before it reaches the sandbox.
- ``missing_check_code(reqs)`` is a single expression cell; its value lists the requirements to
  install. A requirement with a version or an extra is always installed (pip decides); a bare name
  is installed only when its module cannot be imported in the sandbox.
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterable

# Modules whose distribution on PyPI has another name, both ways.
_DISTRIBUTIONS = {
    "PIL": "pillow",
    "sklearn": "scikit-learn",
    "cv2": "opencv-python",
    "yaml": "pyyaml",
    "bs4": "beautifulsoup4",
    "dateutil": "python-dateutil",
}
_MODULES = {dist: module for module, dist in _DISTRIBUTIONS.items()}
_REQUIREMENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._\-]*(\[[A-Za-z0-9,._\-]+\])?([<>=!~][^\s;]*)?$")
_BARE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._\-]*$")


def requirements(names: Iterable[str]) -> list[str]:
    """Return the pip requirements for ``names``, in order, without duplicates."""
    found: list[str] = []
    for name in names:
        if not isinstance(name, str):
            raise TypeError(f"Package names must be strings, got {type(name).__name__}.")
        name = name.strip()
        if name in ("", "*"):
            continue
        if _BARE.match(name):
            top = name.split(".")[0]
            if top in sys.stdlib_module_names:
                continue
            name = _DISTRIBUTIONS.get(top, top)
        elif not _REQUIREMENT.match(name):
            raise ValueError(
                f"{name!r} is not a package name or requirement (like 'emoji' or "
                "'emoji==2.15.0'); pip options and URLs are not accepted."
            )
        if name not in found:
            found.append(name)
    return found


def module_name(requirement: str) -> str | None:
    """The module a bare requirement provides, or None when pip must decide (a pin, an extra)."""
    if not _BARE.match(requirement):
        return None
    lowered = requirement.lower()
    return _MODULES.get(lowered, lowered.replace("-", "_"))


def missing_check_code(reqs: list[str]) -> str:
    """An expression cell whose value is the list of ``reqs`` the sandbox must install."""
    pairs = [(req, module_name(req)) for req in reqs]
    return (
        "[req for req, mod in "
        f"{pairs!r} "
        "if mod is None or __import__('importlib.util').util.find_spec(mod) is None]"
    )


def parse_missing(text_repr: str, reqs: list[str]) -> list[str]:
    """Read the check cell's value; fall back to every requirement if it is unreadable."""
    try:
        value = ast.literal_eval(text_repr)
    except (ValueError, SyntaxError):
        return list(reqs)
    if isinstance(value, list) and all(item in reqs for item in value):
        return [str(item) for item in value]
    return list(reqs)
