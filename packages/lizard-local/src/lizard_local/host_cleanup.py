"""Remove the server's own directory trees on the host without ever reaching past them.

The server deletes only what it made: a sandbox's directories when the sandbox ends, its state
directory when it exits, and the state directory of a server that was killed. Each is removed by
:func:`remove_tree`, which

- never follows a symbolic link (``shutil.rmtree``'s descriptor-based walk, which also refuses a
  top that is itself a link), and
- refuses a tree with a mount point inside it, leaving it in place with a warning: a bind mount
  there (from a host-mode command run as root, or a mount that leaked out of a sandbox's
  namespace) would make a recursive delete go on into whatever is mounted, such as the host's
  own directories.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

# The agent runs as a standalone program, so the one copy of this parser lives there.
from lizard_local.sandbox_agent import unescape_mount_path

__all__ = ["mount_points_under", "remove_tree"]

log = logging.getLogger("lizard_local")


def mount_points_under(path: str | Path) -> list[str]:
    """Mount points of this process's mount namespace at or below ``path`` (real path)."""
    top = os.path.realpath(path)
    prefix = top.rstrip("/") + "/"
    try:
        with open("/proc/self/mountinfo") as f:
            points = [unescape_mount_path(line.split()[4]) for line in f if line.strip()]
    except OSError:
        return []  # not Linux: nothing to check against
    return [p for p in points if p == top or p.startswith(prefix)]


def remove_tree(path: str | Path) -> bool:
    """Remove the directory tree ``path`` unless it holds a mount point; False if left in place."""
    if not os.path.lexists(path):
        return True
    if os.path.islink(path):
        os.unlink(path)  # the link, never what it points to
        return True
    mounted = mount_points_under(path)
    if mounted:
        log.warning("not removing %s: mount points inside it: %s", path, ", ".join(mounted))
        return False
    shutil.rmtree(path, ignore_errors=True)
    return not os.path.lexists(path)
