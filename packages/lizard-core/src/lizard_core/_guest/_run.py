"""What the launcher and the hub share: running a program as ``python3 -c`` would, pidfds.

Part of the launcher program (bundled by ``lizard_core._guest.source``); the hub, which runs in the
launcher's globals, has it from there.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: the compact program drops this block and every annotation
    from typing import Any, Dict, List, Optional


def unpack(program: bytes) -> Any:
    """A program as it travels (deflated, base64), compiled."""
    import binascii
    import zlib

    return compile(zlib.decompress(binascii.a2b_base64(program)), "<string>", "exec")


def run_main(code: Any, argv: List[str], given: Optional[Dict[str, Any]] = None) -> int:
    """Run ``code`` as ``python -c`` runs its program; its exit code, output flushed.

    ``given``: globals the program starts with besides ``python -c``'s own (the launcher's
    :data:`~lizard_core._guest.launcher.HUB_FORK`).
    """
    import builtins

    sys.argv = argv
    status = 0
    namespace = {"__name__": "__main__", "__builtins__": builtins, "__doc__": None}
    namespace.update(given or {})
    try:
        exec(code, namespace)
    except SystemExit as stop:
        if stop.code is None:
            status = 0
        elif isinstance(stop.code, int):
            status = stop.code & 0xFF
        else:
            sys.stderr.write("%s\n" % (stop.code,))
            status = 1
    except BaseException:
        import traceback

        traceback.print_exc()
        status = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    return status


def open_pidfd(pid: int) -> int:
    """A pidfd of ``pid`` (Linux 5.3+, Python 3.9+), else -1."""
    try:
        return os.pidfd_open(pid)  # type: ignore[attr-defined,unused-ignore]
    except (AttributeError, OSError):
        return -1
