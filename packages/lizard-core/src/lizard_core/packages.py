"""Which pip packages code needs, and which of them a sandbox's kernel lacks.

An adapter whose framework names what its code imports (a list of extra imports, a tool's
requirements) turns those names into pip requirements with :func:`requirements`, asks
:func:`missing_requirements` which ones the sandbox lacks, and hands those to
:meth:`lizard_core.kernel.Kernel.install`. Contract (proven in ``tests/test_packages.py``, the
check against lizard-local):

- **Names.** :func:`requirements` accepts module names (``PIL``, ``numpy.linalg``, ``*``) and
  pip requirements (``emoji==2.15.0``, ``requests[socks]``), and smolagents' wildcard form
  (``numpy.*``, the package with its submodules), and returns pip requirements, in
  order, without duplicates: ``*`` and standard-library modules (the host Python's
  ``sys.stdlib_module_names``) are dropped, a submodule becomes its top-level package, and the
  few modules whose distribution has another name are mapped (``PIL`` -> ``pillow``,
  ``sklearn`` -> ``scikit-learn``, ...). Its output passed to it again comes back unchanged.
- **Safety.** Anything that could be read as a pip option, a URL, a path or a second argument
  (``--index-url=...``, ``-e .``, ``git+https://...``, ``a b``, ``pkg; cmd``) is a ValueError;
  a name that is not a str, or a single str instead of a list, a TypeError. Both are raised
  before any request.
- **The check.** :func:`missing_requirements` (and :func:`amissing_requirements`) costs one
  cell (one request through :meth:`~lizard_core.kernel.Kernel.execute`), none for an empty
  list, and returns a :class:`PackageCheck`. A requirement with a version or an extra is always
  reported missing (pip decides whether it is satisfied); a bare name only when its module
  cannot be found by the kernel's Python (``importlib.util.find_spec``). ``missing`` is a
  sublist of the requirements given, in their order. When the cell fails (a timeout, a
  namespace that shadows ``__import__``) or its value cannot be read, every requirement is
  reported: installing too much is safe, skipping a package is not.
- **The kernel.** The check runs in the kernel's namespace without changing it. It is an
  ordinary cell: if it is the call that finds the kernel dead or replaced, the fresh kernel
  answers and the loss is reported as for any cell, in :attr:`PackageCheck.state_lost` and
  :attr:`PackageCheck.notice`; the next call does not report it again.
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from lizard_core.kernel import ExecutionResult, Kernel

__all__ = [
    "CHECK_TIMEOUT_S",
    "PackageCheck",
    "amissing_requirements",
    "missing_requirements",
    "module_name",
    "requirements",
]

CHECK_TIMEOUT_S: Final = 60.0
"""Default seconds the missing-package check cell may run before it is interrupted."""


@dataclass(frozen=True)
class PackageCheck:
    """What :func:`missing_requirements` found, and whether its cell found the kernel lost."""

    missing: tuple[str, ...]
    """The requirements to pass to :meth:`~lizard_core.kernel.Kernel.install`, in order."""
    state_lost: bool = False
    """The check ran in a fresh kernel: the namespace earlier calls built is gone."""
    notice: str | None = None
    """Why state was lost, in words fit for a user or a model; None when it was not."""


# Modules whose distribution on PyPI has another name, both ways.
_DISTRIBUTIONS: Final = {
    "PIL": "pillow",
    "sklearn": "scikit-learn",
    "cv2": "opencv-python",
    "yaml": "pyyaml",
    "bs4": "beautifulsoup4",
    "dateutil": "python-dateutil",
}
_MODULES: Final = {dist: module for module, dist in _DISTRIBUTIONS.items()}
_REQUIREMENT: Final = re.compile(
    r"[A-Za-z0-9][A-Za-z0-9._\-]*(\[[A-Za-z0-9,._\-]+\])?([<>=!~][^\s;]*)?"
)
_BARE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._\-]*")


def requirements(names: Iterable[str]) -> list[str]:
    """Return the pip requirements for module names or requirements, in order, deduplicated.

    Args:
        names: Module names (``PIL``, ``numpy.linalg``, ``*``) or pip requirements
            (``emoji==2.15.0``); surrounding whitespace is ignored.

    Returns:
        Pip requirements: standard-library modules and ``*`` dropped, submodules reduced to
        their top-level package, known module names mapped to their distribution.

    Raises:
        TypeError: ``names`` is a single str, or holds something other than str.
        ValueError: A name could be read as a pip option, URL or path.
    """
    if isinstance(names, str):
        raise TypeError("names must be a list of package names, not a str")
    found: list[str] = []
    for name in names:
        if not isinstance(name, str):
            raise TypeError(f"Package names must be strings, got {type(name).__name__}.")
        name = name.strip()
        if name.endswith(".*"):
            name = name[:-2]  # smolagents' "numpy.*": the package and its submodules
        if name in ("", "*"):
            continue
        if _BARE.fullmatch(name):
            top = name.split(".")[0]
            if top in sys.stdlib_module_names:
                continue
            name = _DISTRIBUTIONS.get(top, top)
        elif not _REQUIREMENT.fullmatch(name):
            raise ValueError(
                f"{name!r} is not a package name or requirement (like 'emoji' or "
                "'emoji==2.15.0'); pip options and URLs are not accepted."
            )
        if name not in found:
            found.append(name)
    return found


def module_name(requirement: str) -> str | None:
    """Return the module a bare requirement provides (``pillow`` -> ``PIL``).

    None for a requirement with a version or an extra: whether it is satisfied is pip's call.
    """
    if not _BARE.fullmatch(requirement):
        return None
    lowered = requirement.lower()
    return _MODULES.get(lowered, lowered.replace("-", "_"))


def missing_requirements(
    kernel: Kernel, reqs: Sequence[str], *, timeout: float = CHECK_TIMEOUT_S
) -> PackageCheck:
    """Return the requirements the kernel's sandbox must install, checked in one cell.

    Like any cell, the check reports a kernel it found dead or replaced (``state_lost``).

    Args:
        kernel: The kernel whose Python will import the packages.
        reqs: Pip requirements, as :func:`requirements` returns them.
        timeout: Seconds the check cell may run.

    Returns:
        A :class:`PackageCheck`: its ``missing`` is the sublist of ``reqs`` to pass to
        :meth:`~lizard_core.kernel.Kernel.install` (pinned requirements and bare ones whose
        module is absent; all of ``reqs`` when the check fails), and ``state_lost`` and
        ``notice`` report a kernel that the check found dead or replaced, as
        :class:`~lizard_core.kernel.ExecutionResult` does.

    Raises:
        TypeError: ``kernel`` is not a Kernel, or ``reqs`` is a str or holds a non-str.
        ValueError: A requirement could be read as a pip option, URL or path.
    """
    checked = _checked(kernel, reqs)
    if not checked:
        return PackageCheck(())
    result = kernel.execute(_check_code(checked), timeout=timeout)
    return _answer(result, checked)


async def amissing_requirements(
    kernel: Kernel,
    reqs: Sequence[str],
    *,
    timeout: float = CHECK_TIMEOUT_S,  # noqa: ASYNC109 - the cell's limit, enforced in the guest
) -> PackageCheck:
    """Async :func:`missing_requirements`; cancelling the task interrupts the check cell."""
    checked = _checked(kernel, reqs)
    if not checked:
        return PackageCheck(())
    result = await kernel.aexecute(_check_code(checked), timeout=timeout)
    return _answer(result, checked)


def _checked(kernel: object, reqs: object) -> list[str]:
    """Validate the arguments of the check before any request."""
    if not isinstance(kernel, Kernel):
        raise TypeError(f"kernel must be a lizard_core Kernel, not {type(kernel).__name__}")
    if isinstance(reqs, str) or not isinstance(reqs, Sequence):
        raise TypeError("reqs must be a sequence of requirement strings")
    checked: list[str] = []
    for req in reqs:
        if not isinstance(req, str):
            raise TypeError(f"Requirements must be strings, got {type(req).__name__}.")
        if not _REQUIREMENT.fullmatch(req):
            raise ValueError(
                f"{req!r} is not a pip requirement (like 'emoji' or 'emoji==2.15.0'); "
                "pass names through requirements() first."
            )
        checked.append(req)
    return checked


def _check_code(reqs: list[str]) -> str:
    """One expression cell whose value is the list of ``reqs`` the sandbox must install."""
    pairs = [(req, module_name(req)) for req in reqs]
    return (
        "[req for req, mod in "
        f"{pairs!r} "
        "if mod is None or __import__('importlib.util').util.find_spec(mod) is None]"
    )


def _answer(result: ExecutionResult, reqs: list[str]) -> PackageCheck:
    """The check cell's answer (every requirement when the cell failed), and any lost state."""
    missing = list(reqs) if result.error is not None else _parse_missing(result.text or "", reqs)
    return PackageCheck(tuple(missing), state_lost=result.state_lost, notice=result.notice)


def _parse_missing(text_repr: str, reqs: list[str]) -> list[str]:
    """Read the check cell's value; fall back to every requirement if it is unreadable."""
    try:
        value = ast.literal_eval(text_repr)
    except (ValueError, SyntaxError):
        return list(reqs)
    if isinstance(value, list) and all(item in reqs for item in value):
        return [str(item) for item in value]
    return list(reqs)
