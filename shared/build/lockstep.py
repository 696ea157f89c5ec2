"""Hatchling metadata hook that keeps every package of the repository in lockstep.

The version lives in one file, ``VERSION`` at the repository root. Inside the repository each
package reaches it through a ``VERSION`` symlink; an sdist carries a real copy (``force-include``),
so a wheel built from the sdist gets the same version. Dependencies listed in the hook's
``dependencies`` option may say ``{version}``, which is how an adapter pins ``lizard-core`` exactly
without a hand-edited pin.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hatchling.metadata.plugin.interface import MetadataHookInterface


class LockstepMetadataHook(MetadataHookInterface):
    """Set ``version`` from ``VERSION`` and format ``{version}`` into the listed dependencies."""

    PLUGIN_NAME = "custom"

    def update(self, metadata: dict[str, Any]) -> None:
        """Fill in the version and the formatted dependencies."""
        version = (Path(self.root) / "VERSION").read_text(encoding="utf-8").strip()
        metadata["version"] = version
        dependencies = self.config.get("dependencies", [])
        metadata["dependencies"] = [dep.format(version=version) for dep in dependencies]
