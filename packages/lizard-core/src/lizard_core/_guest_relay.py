"""How a guest program is started: a shell relay to the sandbox's resident hub, else Python.

Every guest call is one exec of ``sh -c RELAY lizard-guest <key> <hub> <program> <args>...``, the
two programs deflated and base64 (:func:`packed`), so a call carries less than one plain program:

- When the user's hub for ``key`` is live (named in the user's private directory, alive, not
  stopped, started when its name says), the relay hands the hub its pid through ``/proc`` and
  waits; the hub's child takes the relay's stdio and writes the program's frames to it, and the
  relay exits as the child did. No Python starts and nothing is compiled for the operation.
- Otherwise (the first call on a sandbox, a wiped ``HOME``, a sandbox resumed without its
  processes, another lizard-core version's hub, a hub that declined or was lost before the
  program started) the relay runs ``python3 -I -S -c BOOT <key> <hub> <program> <args>...`` in
  the same exec, which starts a hub for the next call and runs the program itself. So a hub is
  never required, and a stale one is never used: the result is the same either way, in one
  request.
- ``key`` is the hash of the relay and the hub program, so two versions never share a hub; the
  program itself always travels in the request, so a hub runs whatever version it is sent.

The hub's own contract is in :mod:`lizard_core._guest.hub`; the program ``BOOT`` runs is
:mod:`lizard_core._guest.launcher`, which carries it.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import zlib
from typing import Final

from lizard_core._guest import PART_BREAK, program

__all__ = ["BOOT", "PYTHON", "RELAY", "guest_argv", "hub_key", "overhead", "packed"]

PYTHON: Final = ("python3", "-I", "-S", "-c")
"""How a guest program starts when no hub serves it: isolated from the sandbox's PYTHON*
variables, without site."""

BOOT: Final = "import binascii,sys,zlib;exec(zlib.decompress(binascii.a2b_base64(sys.argv[2])))"
"""The ``-c`` program of the launcher and the hub: the hub program (``lizard_core._guest.launcher``,
which carries the hub) travels deflated and base64."""

RELAY: Final = """\
h=${HOME:-/root} e=0 i= r= p= q=
d="$h/.cache/lizard-hub-$1"
trap 'exit 0' USR1
trap 'exec @PYTHON@ "@BOOT@" "$@" 4>&- 5<&- 6<&- 7>&- 8<&- 9>&-' USR2
trap 'i=1 r=1' 44
trap 'i=1' URG
trap 'i=1 e=$((e|1))' 35
trap 'i=1 e=$((e|2))' 36
trap 'i=1 e=$((e|4))' 37
trap 'i=1 e=$((e|8))' 38
trap 'i=1 e=$((e|16))' 39
trap 'i=1 e=$((e|32))' 40
trap 'i=1 e=$((e|64))' 41
trap 'i=1 e=$((e|128))' 42
trap 'i=1 q=1' 43
k() { s=$1 x=${20}; }
for f in "$d"/hub.*; do p=${f##*/hub.}; done
t=${p#*.} p=${p%%.*}
if case $p.$t in *[!0-9.]*|.*|*.) false;; esac && [ -O "$h" ] && [ -O "$d" ] &&
  [ ! -h "$d" ] && [ -O "$f" ] && [ ! -h "$f" ] &&
  { command exec 8<"/proc/$p"; } 2>/dev/null &&
  { read -r l </proc/self/fd/8/stat; } 2>/dev/null && case $l in
    "$p (lizard-hub) "*")"*) false;; "$p (lizard-hub) "*) k ${l#*) };; *) false;; esac &&
  [ "$x" = "$t" ] && [ "$s" != T ] && [ "$s" != t ] &&
  command exec 9>&2 &&
  { command exec 4>&1 6<&0 7<>/proc/self/fd/8/fd/11 5</proc/self/fd/7 7>&-; } 2>/dev/null &&
  printf '%08d\\n' "$$" 2>/dev/null 3<>/proc/self/fd/8/fd/3 >&3
then
  exec 8<&-
  while i=; read -r _ <&5 || [ -n "$i" ]; do [ -z "$q" ] || exit $e; done
  [ -z "$q" ] || exit $e
  [ -z "$r" ] || exit 70
fi
exec @PYTHON@ "@BOOT@" "$@" 4>&- 5<&- 6<&- 7>&- 8<&- 9>&-
""".replace("@PYTHON@", " ".join(PYTHON)).replace("@BOOT@", BOOT)
"""POSIX sh (dash, bash, busybox), builtins only. The hub is the process that the name file
``hub.<pid>.<start time>`` in the user's private directory names (the directory and the file
the user's own and not links: only the user's own hub can have made that file, even where
``HOME`` is a directory others may write, such as ``/tmp``), checked in ``/proc/<pid>/stat``,
read once and whole (a name of exactly ``lizard-hub``: one with spaces and a parenthesis would
shift the fields after it, so that another could pass for the start time)
(alive, not stopped, named ``lizard-hub``, started then); the relay reaches it only through
``/proc/<pid>/fd``: it opens the hub's ``wait`` pipe (fd 11, which nobody writes), writes its pid
to the hub's ``in`` pipe (fd 3) as one 9-byte record (``%08d`` and a newline: an atomic write)
and blocks reading ``wait``. A pid queued when the hub dies is taken by the hub's watcher, which
sends ``USR2`` (``lizard_core._guest._hub_queue``). It opens ``/proc/<pid>`` once (fd
8) and reads the stat and opens both pipes through that descriptor, which names one process for
good: a pid reused after the check would leave it naming the dead hub, so the checks and the
opens are of the same process. The hub's child ends it with signals: ``USR1`` (exit 0), one
real-time signal per bit of another exit code then signal 43 (exit with them, from the loop:
dash runs pending traps again inside a trap, so a trap that exited could run before the last
bit's trap had added its bit), ``USR2`` (run the launcher after all, nothing having run); signal
44 says the program started; ``URG``, sent after the last of them until the relay acts on it,
only wakes it (a signal that lands just before ``read`` blocks runs its trap only once ``read``
returns).
``wait`` is opened for reading through a moment's read-write copy (fd 7), so that the open cannot
block when the hub and its children are gone at that very moment. End of file on
``wait`` (the hub and all its children gone without a word) runs the launcher too, unless the
program had started (then 70). Its stdin, stdout and stderr are copied to fds 6, 4 and 9
first, since ``read <&5``, ``>&3`` and the pid write's ``2>/dev/null`` point fds 0, 1 and 2
elsewhere for moments (the hub's child takes the copies as soon as it reads the pid, which can
be before that write has returned); the launcher gets none of these nor fd 5. Every
redirection that may be in force when a signal arrives is a simple command's own, which the
shell undoes before it runs a trap: a ``USR2``
that comes while the relay still writes its pid (a grouping's redirection would still be in
force, its ``2>/dev/null`` included) runs the launcher with the exec's own stderr."""

_NAME: Final = "lizard-guest"


@functools.cache
def hub_key() -> str:
    """The hub's version: the hash of the relay and the hub program (16 hex digits)."""
    if PART_BREAK in program("launcher"):
        raise ValueError("BOOT runs the launcher as one part")
    digest = hashlib.sha256(RELAY.encode() + b"\0" + program("launcher").encode())
    return digest.hexdigest()[:16]


@functools.lru_cache(maxsize=8)
def packed(program_text: str) -> str:
    """``program_text`` as it travels: deflated, base64 (about a third of its size).

    Each of its parts (``lizard_core._guest.PART_BREAK``) on its own, joined by ``.``, which
    base64 never writes: the launcher compiles a part only once those before it have run.
    """
    return ".".join(
        base64.b64encode(zlib.compress(part.encode(), 9)).decode("ascii")
        for part in program_text.split(PART_BREAK)
    )


def guest_argv(program_text: str, args: list[str]) -> list[str]:
    """The exec argv that runs ``program_text`` with ``args`` (as ``sys.argv[1:]``)."""
    hub = packed(program("launcher"))
    return ["sh", "-c", RELAY, _NAME, hub_key(), hub, packed(program_text), *args]


def overhead(program_text: str) -> int:
    """Bytes of argv a call of ``program_text`` carries besides its own arguments."""
    return sum(len(item) + 1 for item in guest_argv(program_text, []))
