"""How a guest program is started: a shell relay to the sandbox's resident hub, else Python.

Every guest call is one exec of ``sh -c RELAY lizard-guest <key> <hub> <program> <args>...``, the
two programs deflated and base64 (:func:`packed`), so a call carries less than one plain program:

- When the sandbox's hub for ``key`` is live (its pid file names a process, not stopped, whose
  fd 3 is the hub's FIFO, owned by this user), the relay hands the hub its pid and waits; the
  hub's child writes the program's frames straight to the relay's stdout and the relay exits
  when the child did. No Python starts and nothing is compiled for the operation.
- Otherwise (the first call on a sandbox, a wiped ``/tmp``, a sandbox resumed without its
  processes, another lizard-core version's hub, a hub that declined) the relay runs
  ``python3 -I -S -c BOOT <key> <hub> <program> <args>...`` in the same exec, which starts a
  hub for the next call and runs the program itself. So a hub is never required, and a stale
  one is never used: the result is the same either way, in one request.
- ``key`` is the hash of the relay and the hub program, so two versions never share a hub; the
  program itself always travels in the request, so a hub runs whatever version it is sent.

The hub's own contract is in :mod:`lizard_core._guest.hub`.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import zlib
from typing import Final

from lizard_core._guest import program

__all__ = ["BOOT", "PYTHON", "RELAY", "guest_argv", "hub_key", "overhead", "packed"]

PYTHON: Final = ("python3", "-I", "-S", "-c")
"""How a guest program starts when no hub serves it: isolated from the sandbox's PYTHON*
variables, without site."""

BOOT: Final = "import binascii,sys,zlib;exec(zlib.decompress(binascii.a2b_base64(sys.argv[2])))"
"""The ``-c`` program of the launcher and the hub: the hub program travels deflated and base64."""

RELAY: Final = """\
d="${TMPDIR:-/tmp}/.lizard-hub-$1"
trap 'exit 0' USR1
trap 'exit 1' ALRM
trap 'exec @PYTHON@ "@BOOT@" "$@"' USR2
if { read -r p <"$d/pid" && read -r _ _ s _ <"/proc/$p/stat"; } 2>/dev/null &&
  [ "$s" != T ] && [ "$s" != t ] && [ -O "$d/in" ] && [ "$d/in" -ef "/proc/$p/fd/3" ]
then
  exec 4>&1 5<"$d/wait"
  { printf '%s\\n' "$$" >&3; } 3<>"$d/in"
  read -r p <&5
  exit 70
fi
exec @PYTHON@ "@BOOT@" "$@"
""".replace("@PYTHON@", " ".join(PYTHON)).replace("@BOOT@", BOOT)
"""POSIX sh (dash, bash, busybox), builtins only. The relay blocks reading the hub's ``wait``
FIFO, which nobody writes: the hub's child ends it with a signal (``USR1``: exit 0, ``ALRM``:
exit 1, ``USR2``: run the launcher after all, nothing having run), and end of file (the hub and
all its children gone without a word) ends it with 70. ``wait`` is opened before the pid is sent,
so a directory wiped at that moment ends the relay with nothing sent. Writing the pid points the
relay's stdout at the FIFO for a moment, so the hub takes stdout from fd 4, a copy made before."""

_NAME: Final = "lizard-guest"


@functools.cache
def hub_key() -> str:
    """The hub's version: the hash of the relay and the hub program (16 hex digits)."""
    digest = hashlib.sha256(RELAY.encode() + b"\0" + program("hub").encode())
    return digest.hexdigest()[:16]


@functools.lru_cache(maxsize=8)
def packed(program_text: str) -> str:
    """``program_text`` as it travels: deflated, base64 (about a third of its size)."""
    return base64.b64encode(zlib.compress(program_text.encode(), 9)).decode("ascii")


def guest_argv(program_text: str, args: list[str]) -> list[str]:
    """The exec argv that runs ``program_text`` with ``args`` (as ``sys.argv[1:]``)."""
    hub = packed(program("hub"))
    return ["sh", "-c", RELAY, _NAME, hub_key(), hub, packed(program_text), *args]


def overhead(program_text: str) -> int:
    """Bytes of argv a call of ``program_text`` carries besides its own arguments."""
    return sum(len(item) + 1 for item in guest_argv(program_text, []))
