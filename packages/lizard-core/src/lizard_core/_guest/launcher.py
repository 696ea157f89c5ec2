"""The program ``BOOT`` runs: the launcher, and the way into the hub.

Standard library only, Python 3.8+. ``python3 -I -S -c BOOT <key> <hub> <program> <args>...``
(``lizard_core._guest_relay``; ``<hub>`` is this program, packed) runs ``<program>`` as
:mod:`.hub` states, and ``... <hub> serve`` runs a hub. This program is small, so that it compiles
at once: the hub itself (:mod:`.hub`, compact) travels in it as text, :data:`HUB`, compiled into
these globals only where it is needed (:func:`load_hub`), which for a launcher is where it forks
the hub.

A launcher forks the hub before the program runs, so that the hub holds nothing of it. A program
may instead fork the hub itself, at a point of its own, by naming :data:`HUB_FORK` in its first
part's top-level code (``HUB_FORK = globals().get("HUB_FORK")``): it then starts with
``HUB_FORK`` the launcher's fork (call it once, with no thread or signal handler of its own yet:
the hub keeps the program's memory, none of its descriptors nor its buffered output), and is
``None`` where no launcher runs it (a hub's child, ``python3 -c``). A program that names it and
does not call it starts no hub; the next call does. The kernel client so starts a new sandbox's
kernel daemon, the longest path of a new executor's start, before the hub's code is compiled
and forked.

A program in parts (``._run``) has its first part compiled before anything runs, each other part
once those before it have run; the hub forked from it compiles what the launcher had not reached.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from ._descriptors import close_from
from ._run import compiled, open_pidfd, parts, run_main

if TYPE_CHECKING:  # annotations only: the compact program drops this block and every annotation
    from typing import Any, Dict, List

    from .hub import Hub, start_hub

    def carried(name: str) -> str: ...


HUB = carried("hub")
"""The compact hub program (bundled without the parts this one has), as text: the compact form of
this program holds it here (``lizard_core._guest.program``)."""
HUB_FORK = "HUB_FORK"
"""The name a program's top-level code gives to take the hub's fork upon itself."""


def load_hub() -> None:
    """Compile the hub into this program's globals, once."""
    if "Hub" not in globals():
        exec(compile(HUB, "<hub>", "exec"), globals())


def launch() -> None:
    """Run the program in this process; fork a hub for later calls when none runs."""
    key, hub = sys.argv[1], sys.argv[2]
    program = sys.argv[3].encode("ascii")
    codes = parts(program)
    codes[0] = compiled(codes[0])  # the rest once the first part has run (``_run``)
    forked: List[int] = []

    def fork() -> None:
        if forked:
            return  # once
        forked.append(0)
        try:
            forked[0] = fork_hub(key, hub, {program: codes})
        except OSError:
            pass  # no hub: later operations run here too, as before

    given = None
    if HUB_FORK in codes[0].co_names:
        given = {HUB_FORK: fork}  # the hub compiles its code itself, off the program's path
    else:
        load_hub()  # here, where the program waits: the hub is then ready the sooner
        fork()
    status = run_main(codes, ["-c"] + sys.argv[4:], given)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    if forked and forked[0]:
        try:
            os.waitpid(forked[0], 0)  # the go-between, long gone (not awaited before the program)
        except OSError:
            pass
    os._exit(status)  # the hub waiting for this process starts now


def fork_hub(key: str, hub: str, codes: Dict[bytes, Any]) -> int:
    """Fork the hub now (:func:`~.hub.start_hub`); it waits, detached, until this process exits.

    Returns the pid of the go-between that detaches the hub, to reap once the program is done
    (waiting for it now would put a scheduling round trip on the call); this process keeps no
    descriptor of the hub's, so the program sees exactly what ``python3 -c`` would.

    Forked before the program runs, it holds nothing of the program's (no thread, no handler,
    no module state): only this interpreter, started as the hub's own would be (``python3 -I -S
    -c BOOT``). Forked where the program called for it, it holds the program's memory as it
    was then (the request among it, as the launcher's own command line is: this user's, never
    shown in ``ps``), and no descriptor, thread or output of the program's. So it costs no Python
    start-up, which takes longer than the operation, and it compiles the hub only where this
    process has not (:func:`load_hub`); it waits for the program to end (and its output to
    close) before it takes requests.
    """
    launcher = os.getpid()
    pid = os.fork()
    if pid:
        return pid
    try:
        # First: what the program opened (a lock, a socket), where it forks the hub, is let go
        # at once.
        close_from(3)
        # Opened while the launcher surely lives (it reaps this process before it exits), so
        # both name it and no other process that might take its pid later.
        proc = os.open("/proc/%d" % launcher, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        pidfd = open_pidfd(launcher)
        os.setsid()
        if os.fork():
            os._exit(0)
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        if null > 2:
            os.close(null)  # nothing else is open here but proc and pidfd
        # Output the program buffered before it forked the hub is the launcher's to write: here
        # it goes to /dev/null, not into the first call the hub serves.
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        load_hub()
        start_hub(key, hub, codes, proc, pidfd)
    finally:
        os._exit(0)


def main() -> None:
    if sys.argv[3:] == ["serve"]:
        load_hub()
        resident = Hub(sys.argv[1])
        if resident.claim():
            resident.serve()
        os._exit(0)
    launch()


if __name__ == "__main__":
    main()
