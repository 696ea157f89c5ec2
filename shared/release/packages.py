"""The repository's packages, discovered from ``packages/*/pyproject.toml``: the one release list.

``python shared/release/packages.py`` prints their distribution names as a JSON array (the CI and
release workflows build their matrices from it), so a new package folder joins CI and releases
without an edit.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CORE = "lizard-core"  # every adapter pins it exactly
EMULATOR = "lizard-local"  # a development tool: no adapter may require it


def package_dirs() -> dict[str, Path]:
    """Distribution name -> package folder, in a stable order."""
    found = {}
    for pyproject in sorted(ROOT.glob("packages/*/pyproject.toml")):
        name = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["name"]
        found[name] = pyproject.parent
    return found


def adapters() -> list[str]:
    """The framework adapters: every package except the core and the emulator."""
    return [name for name in package_dirs() if name not in {CORE, EMULATOR}]


if __name__ == "__main__":
    print(json.dumps(list(package_dirs())))
