"""Closing a process's descriptors: what the hub's children and the kernel daemon's start share.

Part of the launcher (and so the hub's) and kernel client programs (bundled into each by
``lizard_core._guest.source``).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: the compact program drops this block and every annotation
    from typing import Tuple


def close_from(lowest: int, keep: Tuple[int, ...] = ()) -> None:
    """Close every descriptor from ``lowest`` up, except ``keep``.

    Those open are listed in ``/proc/self/fd``; without it, the first 1024 are tried.
    """
    try:
        fds = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:
        fds = list(range(lowest, 1024))
    for fd in fds:
        if fd >= lowest and fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass  # the listing's own descriptor, closed by now
