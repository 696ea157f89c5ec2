"""Create a framework adapter package from the template in ``shared/adapter-template``.

Usage: ``python shared/new_adapter.py <framework> [--title NAME] [--dist NAME [--module NAME]]``,
or ``nox -s new_adapter -- <framework>``.

For ``my-framework`` it creates ``packages/my-framework-lizard`` (import ``my_framework_lizard``):
a working ``LizardTool`` on lizard_core, its pyproject on the lockstep build hook (with the
``VERSION`` and ``lockstep.py`` symlinks and a copy of ``LICENSE``, and ``lizard-core=={version}``),
a README, ``py.typed``, unit tests and the shared contract tests, an example, and the docs page
``docs/my-framework-lizard.md``. Ruff's ``src`` setting in the root ``pyproject.toml`` already
treats ``packages/*/src`` as first-party, so import sorting needs no registration either.

Nothing else needs registering: nox sessions, the CI matrix and the release list discover
packages from ``packages/*/pyproject.toml`` (``shared/release/packages.py``).

The framework name must be lowercase letters and digits in hyphen-separated words, start with a
letter, be at most 25 characters and not mention Lizard. An existing package or docs page is
never overwritten. Standard library only; exit status 0 on success, 2 on bad input.

A package whose name on PyPI does not follow the ``<framework>-lizard`` pattern (``lizard-adk``,
published before this repository existed) is generated with ``--dist lizard-adk``; its import
name is the distribution's with ``_`` for ``-`` (``lizard_adk``) unless ``--module`` names
another. Both must be lowercase, name Lizard as a word (``lizard`` between separators), and fit
the same length limit as the default names.
"""

from __future__ import annotations

import argparse
import keyword
import os
import re
import shutil
import sys
import tempfile
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parents[1]
TEMPLATE: Final = Path(__file__).resolve().parent / "adapter-template"

MAX_NAME: Final = 25
"""Longest framework name: the template's lines stay within ruff's 100 columns."""
MAX_TITLE: Final = 30
"""Longest display name, for the same reason."""
MAX_DIST: Final = MAX_NAME + len("-lizard")
"""Longest distribution name given with ``--dist``: no longer than a default one."""

_NAME: Final = re.compile(r"[a-z][a-z0-9]*(?:-[a-z0-9]+)*")
_TITLE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9 .+-]*")
_MODULE: Final = re.compile(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)*")
_PLACEHOLDER: Final = re.compile(r"__(?:FRAMEWORK|DIST|MODULE|TITLE)__")
_FIRST_PARTY_IMPORT: Final = re.compile(r"from ([A-Za-z_][\w.]*) import [^()\\]+")
# Symlinks every package has (see shared/build/lockstep.py), relative to the package folder.
_LINKS: Final = {"VERSION": "../../VERSION", "lockstep.py": "../../shared/build/lockstep.py"}


class AdapterError(ValueError):
    """A framework name, title or target the generator refuses; the message says why."""


@dataclass(frozen=True)
class Names:
    """The names a framework's adapter goes by."""

    framework: str
    """As given, e.g. ``my-framework``."""
    title: str
    """The framework's name in prose, e.g. ``My Framework``."""
    dist_name: str | None = None
    """The distribution's name when it is not ``<framework>-lizard`` (``--dist``)."""
    module_name: str | None = None
    """The import name when it is not the distribution's with ``_`` for ``-`` (``--module``)."""

    @property
    def dist(self) -> str:
        """The distribution and folder name, e.g. ``my-framework-lizard``."""
        return self.dist_name or f"{self.framework}-lizard"

    @property
    def module(self) -> str:
        """The import name, e.g. ``my_framework_lizard``."""
        return self.module_name or self.dist.replace("-", "_")

    def replacements(self) -> dict[str, str]:
        """Placeholder -> value."""
        return {
            "__FRAMEWORK__": self.framework,
            "__DIST__": self.dist,
            "__MODULE__": self.module,
            "__TITLE__": self.title,
        }


def _check_override(kind: str, value: str, pattern: re.Pattern[str], separator: str) -> None:
    """Refuse a ``--dist`` / ``--module`` value that is malformed, too long or not Lizard's."""
    if not pattern.fullmatch(value):
        raise AdapterError(
            f"{kind} {value!r} must be lowercase letters and digits in words joined by "
            f"{separator!r}, starting with a letter"
        )
    if len(value) > MAX_DIST:
        raise AdapterError(f"{kind} {value!r} is longer than {MAX_DIST} characters")
    if "lizard" not in value.split(separator):
        raise AdapterError(f"{kind} {value!r} must name Lizard as a word, e.g. 'lizard-adk'")


def check_names(
    framework: str,
    title: str | None = None,
    *,
    dist: str | None = None,
    module: str | None = None,
) -> Names:
    """Validate the framework name (and display title, distribution and import names).

    Raise :class:`AdapterError` if one is bad. ``dist`` and ``module`` replace the default
    ``<framework>-lizard`` / ``<framework>_lizard``; ``module`` needs ``dist``.
    """
    if module is not None and dist is None:
        raise AdapterError("--module needs --dist: the default names go together")
    if dist is not None:
        _check_override("--dist", dist, _NAME, "-")
    if module is not None:
        _check_override("--module", module, _MODULE, "_")
    if not framework:
        raise AdapterError("give the framework's name, e.g. `nox -s new_adapter -- crewai`")
    hint = framework.strip().lower().replace("_", "-").replace(" ", "-")
    if not _NAME.fullmatch(framework):
        suggestion = f" (did you mean {hint!r}?)" if _NAME.fullmatch(hint) else ""
        raise AdapterError(
            f"{framework!r} is not a valid framework name{suggestion}: use lowercase letters and "
            "digits in hyphen-separated words, starting with a letter, e.g. 'crewai' or "
            "'llama-index'"
        )
    if len(framework) > MAX_NAME:
        raise AdapterError(f"{framework!r} is longer than {MAX_NAME} characters")
    if "lizard" in framework:
        raise AdapterError(
            f"{framework!r}: name the framework only; the generator adds '-lizard' itself"
        )
    names = Names(framework, title if title is not None else framework, dist, module)
    if not names.module.isidentifier() or keyword.iskeyword(names.module):
        raise AdapterError(f"{framework!r} does not give a usable import name ({names.module})")
    if not _TITLE.fullmatch(names.title) or len(names.title) > MAX_TITLE:
        raise AdapterError(
            f"title {names.title!r} must be letters, digits, spaces, '.', '+' or '-', "
            f"at most {MAX_TITLE} characters"
        )
    return names


def render(text: str, names: Names) -> str:
    """Fill in the template's placeholders."""
    for placeholder, value in names.replacements().items():
        text = text.replace(placeholder, value)
    return text


def sort_first_party_imports(text: str, first_party: set[str]) -> str:
    """Sort each run of single-line ``from X import ...`` lines whose X is first-party.

    The template cannot order them itself: where the new package's name sorts among
    ``lizard_core`` and ``lizard_local`` depends on the name. The order is ruff's (isort's):
    by module name, case-insensitively.
    """
    lines = text.split("\n")
    out: list[str] = []
    run: list[str] = []

    def flush() -> None:
        out.extend(sorted(run, key=lambda line: line.split()[1].lower()))
        run.clear()

    for line in lines:
        match = _FIRST_PARTY_IMPORT.fullmatch(line)
        if match and match.group(1).split(".")[0] in first_party:
            run.append(line)
            continue
        flush()
        out.append(line)
    flush()
    return "\n".join(out)


def existing_packages(root: Path) -> dict[str, Path]:
    """Distribution name -> folder of every package already in ``root/packages``."""
    found = {}
    for pyproject in sorted((root / "packages").glob("*/pyproject.toml")):
        data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
        found[str(data.get("project", {}).get("name", ""))] = pyproject.parent
    return found


def _template_files(template: Path) -> list[tuple[Path, Path]]:
    """(template file, path relative to the repository root with placeholders) pairs."""
    pairs = []
    for source in sorted(template.rglob("*")):
        if not source.is_file() or "__pycache__" in source.parts:
            continue
        relative = source.relative_to(template)
        top = relative.parts[0]
        if top == "package":
            pairs.append((source, Path("packages", "__DIST__", *relative.parts[1:])))
        elif top == "docs":
            pairs.append((source, relative))
    return pairs


def generate(root: Path, names: Names, template: Path = TEMPLATE) -> list[Path]:
    """Create the adapter package and its docs page under ``root``; return what was written.

    Everything is checked first, and the package is assembled in a staging folder that is moved
    into place in one step, so a refusal or a failure leaves nothing behind.
    """
    target = root / "packages" / names.dist
    if target.exists() or target.is_symlink():
        raise AdapterError(f"packages/{names.dist} exists already; pick another name")
    existing = existing_packages(root)
    if names.dist in existing:
        raise AdapterError(f"a package named {names.dist!r} exists already")
    if any((folder / "src" / names.module).exists() for folder in existing.values()):
        raise AdapterError(f"an existing package imports as {names.module!r} already")
    if not (template / "package" / "pyproject.toml").is_file():
        raise AdapterError(f"the adapter template is missing: {template}")
    package: dict[Path, str] = {}  # path in the package -> content
    others: dict[Path, str] = {}  # path in the repository -> content
    first_party = {"lizard_core", "lizard_local", names.module}
    for source, dest in _template_files(template):
        content = render(source.read_text(encoding="utf-8"), names)
        if dest.suffix == ".py":
            content = sort_first_party_imports(content, first_party)
        leftover = _PLACEHOLDER.search(content)
        if leftover:
            raise AdapterError(f"{source}: placeholder {leftover.group()} was not replaced")
        dest = Path(render(str(dest), names))
        if dest.parts[:2] == ("packages", names.dist):
            package[Path(*dest.parts[2:])] = content
        elif (root / dest).exists():
            raise AdapterError(f"{dest} exists already; remove it or pick another name")
        else:
            others[dest] = content

    staging = Path(tempfile.mkdtemp(prefix=f".{names.dist}-", dir=root / "packages"))
    try:
        for relative, content in package.items():
            (staging / relative).parent.mkdir(parents=True, exist_ok=True)
            (staging / relative).write_text(content, encoding="utf-8")
        shutil.copyfile(root / "LICENSE", staging / "LICENSE")
        for link, points_to in _LINKS.items():
            os.symlink(points_to, staging / link)
        staging.chmod(0o755)
        staging.rename(target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    written = [target]
    for dest, content in others.items():
        (root / dest).parent.mkdir(parents=True, exist_ok=True)
        (root / dest).write_text(content, encoding="utf-8")
        written.append(root / dest)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(
        prog="nox -s new_adapter --",
        description="Create packages/<framework>-lizard (or --dist) from shared/adapter-template.",
    )
    parser.add_argument("framework", nargs="?", default="", help="e.g. crewai or llama-index")
    parser.add_argument("--title", help="the framework's name in prose, e.g. CrewAI")
    parser.add_argument(
        "--dist", help="the distribution's name, when not <framework>-lizard, e.g. lizard-adk"
    )
    parser.add_argument(
        "--module", help="the import name, when not the distribution's with _ for -"
    )
    parser.add_argument("--root", type=Path, default=ROOT, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    root: Path = args.root.resolve()
    try:
        names = check_names(args.framework, args.title, dist=args.dist, module=args.module)
        written = generate(root, names)
    except AdapterError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    package = f"packages/{names.dist}"
    print(f"Created {package} (import {names.module}):")
    for path in written:
        print(f"  {path.relative_to(root)}")
    print(
        f"""
It is already in `nox -l`, the CI matrix and the release list: they discover packages from
packages/*/pyproject.toml (shared/release/packages.py). Next:
  1. add the framework to the dependencies in {package}/pyproject.toml
  2. nox -s dev   (or: uv pip install -e {package})
  3. pytest {package}/tests
  4. write the framework seam in {package}/src/{names.module}/ (docs/adding-an-adapter.md)"""
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
