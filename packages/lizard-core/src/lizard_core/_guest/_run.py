"""What the launcher and the hub share: running a program as ``python3 -c`` would, pidfds.

Part of the launcher program (bundled by ``lizard_core._guest.source``); the hub, which runs in the
launcher's globals, has it from there.

A program travels in one part or more (``lizard_core._guest_relay.packed``: each deflated and
base64, joined by ``.``), run in turn in one namespace, as the whole text would run. Each part is
compiled only once the parts before it have run (:func:`run_main`), so that a program's first part
can set its slowest work going before the rest is compiled; a hub compiles every part once, for
all its children (:func:`unpack`).
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: the compact program drops this block and every annotation
    from typing import Any, Dict, List, Optional


def parts(program: bytes) -> List[Any]:
    """A program as it travels, its parts not compiled yet (see :func:`run_main`)."""
    return list(program.split(b"."))


def unpack(program: bytes) -> List[Any]:
    """A program as it travels, every part compiled."""
    return [compiled(part) for part in parts(program)]


def compiled(part: Any) -> Any:
    """One part (deflated, base64), compiled; a code object as it is."""
    if not isinstance(part, bytes):
        return part
    import binascii
    import zlib

    return compile(zlib.decompress(binascii.a2b_base64(part)), "<string>", "exec")


def run_main(program: List[Any], argv: List[str], given: Optional[Dict[str, Any]] = None) -> int:
    """Run ``program`` (its parts) as ``python -c`` runs its text; its exit code, output flushed.

    A part not compiled yet is compiled once those before it have run, in place, so that
    whoever holds the list (a hub forked meanwhile) has it compiled too. ``given``: globals the
    program starts with besides ``python -c``'s own (the launcher's
    :data:`~lizard_core._guest.launcher.HUB_FORK`).
    """
    import builtins

    sys.argv = argv
    status = 0
    namespace = {"__name__": "__main__", "__builtins__": builtins, "__doc__": None}
    namespace.update(given or {})
    try:
        for index, part in enumerate(program):
            program[index] = code = compiled(part)
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
