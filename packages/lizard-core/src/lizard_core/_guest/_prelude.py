"""What every guest program shares, written once: bundled into each program that imports it.

- :data:`JOBS_ROOT` is the one place guest programs keep job folders (spills, staged bodies,
  chunks); the host's ``lizard_core._jobs`` names the same folder.
- :func:`frame_line` is the wire form of one frame: compact ASCII JSON and a newline.
- :func:`cleanup` removes the job folders a request names (``rm``), and nothing else.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: the compact program drops this block and every annotation
    from typing import Any, Dict, Iterable, Optional

    Frame = Dict[str, Any]
    """One frame of either protocol: a JSON object with a type ``t``."""

JOBS_ROOT = "/tmp/.lizard-core"


def frame_line(frame: Frame) -> bytes:
    """One frame as the line that carries it."""
    # Imported here (free once imported): the kernel client starts its daemon before it pays
    # for json, which imports re and enum.
    import json

    return (json.dumps(frame, separators=(",", ":")) + "\n").encode("ascii")


def cleanup(paths: Optional[Iterable[Any]]) -> None:
    """Remove job directories the host has finished with (only directly under ``JOBS_ROOT``)."""
    for path in paths or ():
        if os.path.dirname(os.path.normpath(str(path))) == JOBS_ROOT:
            import shutil  # only when there is something to remove: it costs a new Python 3 ms

            shutil.rmtree(path, ignore_errors=True)
