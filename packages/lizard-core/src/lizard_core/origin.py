"""Where a sandbox came from: this process's run id and this machine's id.

Every sandbox ``lizard_core`` creates carries both in its metadata
(:attr:`SandboxConfig.sandbox_metadata <lizard_core.config.SandboxConfig.sandbox_metadata>`),
so that a later cleanup (:mod:`lizard_core.inventory`) can destroy what this machine, or one
run, left behind without touching a teammate's sandboxes in the same project.

- :func:`run_id` is random, made once per process: one eval, one agent server, one script.
- :func:`machine_id` is stable across processes and reboots of one host, and says nothing about
  it: a hash of the OS machine id (``/etc/machine-id``), else of the host name and hardware
  address. ``LIZARD_MACHINE_ID`` replaces it (e.g. for containers that share a host identity).
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import secrets
import socket
import uuid
from pathlib import Path
from typing import Final

__all__ = ["ORIGIN_ID", "check_origin_id", "machine_id", "run_id"]

ORIGIN_ID: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
"""What a run or machine id may look like: a short, plain token."""

_RUN_ID: Final = secrets.token_hex(8)
_MACHINE_ID_FILES: Final = ("/etc/machine-id", "/var/lib/dbus/machine-id")


def check_origin_id(value: object, *, name: str) -> str:
    """``value`` if it is a run or machine id (:data:`ORIGIN_ID`), else TypeError/ValueError."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, not {type(value).__name__}")
    if not ORIGIN_ID.fullmatch(value):
        raise ValueError(f"{name} {value!r} must be 1-64 letters, digits, '.', '_' or '-'")
    return value


def run_id() -> str:
    """This process's run id: 16 random hex digits, the same for every sandbox it creates."""
    return _RUN_ID


@functools.cache
def machine_id() -> str:
    """This machine's id: 16 hex digits of a hash, stable across runs (see the module doc)."""
    given = os.environ.get("LIZARD_MACHINE_ID")
    if given:
        return check_origin_id(given, name="LIZARD_MACHINE_ID")
    seed = ""
    for path in _MACHINE_ID_FILES:
        try:
            seed = Path(path).read_text(encoding="ascii", errors="replace").strip()[:256]
        except OSError:
            continue
        if seed:
            break
    if not seed:
        seed = f"{socket.gethostname()}/{uuid.getnode():012x}"
    return hashlib.sha256(f"lizard-machine:{seed}".encode()).hexdigest()[:16]
