"""The hub's queue: relay pids in its ``in`` pipe, and who takes each one, exactly once.

Part of the hub program (bundled by ``lizard_core._guest.source``). A relay writes its pid to
``in`` as one :data:`RECORD`-byte record (``%08d`` and a newline: a pipe write that small is
atomic, so records never interleave). Every record is taken by exactly one process, and taking it
is what makes that process answer the relay:

- **The hub**, while it lives, looks at the next record without taking it (``tee``), then moves
  it into the spare's ``jobs`` pipe without it leaving the kernel (``splice``): a hub killed
  between the two leaves the record in ``in``, and one killed after has handed it over. Where
  the C library cannot be reached (no ``ctypes``) it reads the record, and a hub killed before
  it wrote it on would lose that relay (the relay then waits for the end of file on ``wait``).
- **The watcher** (:func:`watch`), a process the hub forks once, takes every record left once
  the hub is gone (killed, or exited idle) and has that relay run the launcher: nothing ran
  for it. Without it, a relay queued when its hub died would wait for the end of file on
  ``wait``, which every child of the hub holds: until another call's program, which can run for
  hours, had ended.
"""

from __future__ import annotations

import errno
import os
from typing import TYPE_CHECKING

from ._descriptors import close_from
from ._hub_child import (
    NUDGE,
    SETTLE_S,
    SIGUSR2,
    WAIT_FD,
    acted,
    name,
    relay_argv,
    relay_state,
    signal_relay,
    waits_here,
)
from ._run import open_pidfd

if TYPE_CHECKING:  # annotations only: the compact program drops this block and every annotation
    from typing import Any, List, Optional, Tuple

FIFO_FD = 3
"""The read end of ``in``, in the hub and its watcher."""
RECORD = 9
"""The size of a relay's record: its pid in 8 digits and a newline (pids are below 2**22)."""
_NONBLOCK = 2  # SPLICE_F_NONBLOCK
_LIBC: List[Any] = []


def libc() -> Any:
    """The C library (with ``errno``), looked up once (the hub does it before forking), or None."""
    if not _LIBC:
        try:
            import ctypes

            lib = ctypes.CDLL(None, use_errno=True)
            size, ssize = ctypes.c_size_t, ctypes.c_ssize_t
            lib.tee.argtypes = [ctypes.c_int, ctypes.c_int, size, ctypes.c_uint]
            lib.tee.restype = ssize
            fd, pointer = ctypes.c_int, ctypes.c_void_p
            lib.splice.argtypes = [fd, pointer, fd, pointer, size, ctypes.c_uint]
            lib.splice.restype = ssize
            _LIBC.append(lib)
        except (ImportError, AttributeError, OSError):
            _LIBC.append(None)  # no ctypes or no tee: the hub reads records (see above)
    return _LIBC[0]


def parse(record: bytes) -> int:
    """The pid in a record, or 0 for anything else."""
    if len(record) != RECORD or not record.endswith(b"\n") or not record[:-1].isdigit():
        return 0
    return int(record[:-1])


class Queue:
    """The hub's end of ``in``: look at the next record, then hand it over or drop it."""

    def __init__(self) -> None:
        self.lib = libc()
        self.scratch = (-1, -1)
        if self.lib is not None:
            self.scratch = os.pipe()
        self.record = b""

    def peek(self) -> bytes:
        """The next record (up to :data:`RECORD` bytes), still queued; b"" when there is none."""
        if self.lib is None:
            try:
                self.record = os.read(FIFO_FD, RECORD)  # taken already: no second chance
            except BlockingIOError:
                self.record = b""
            return self.record
        import ctypes

        copied = self.lib.tee(FIFO_FD, self.scratch[1], RECORD, _NONBLOCK)
        if copied <= 0:
            if copied < 0 and ctypes.get_errno() != errno.EAGAIN:  # EAGAIN: nothing queued
                self.lib = None  # tee refused (an old kernel): read records from now on
                return self.peek()
            self.record = b""
            return b""
        self.record = os.read(self.scratch[0], copied)
        return self.record

    def hand_over(self, jobs: int) -> bool:
        """Move the record looked at into ``jobs``, a spare's pipe; False if that spare is gone."""
        if self.lib is None:
            try:
                return os.write(jobs, self.record) == len(self.record)
            except OSError:
                return False
        moved = self.lib.splice(FIFO_FD, None, jobs, None, len(self.record), _NONBLOCK)
        return bool(moved == len(self.record))

    def drop(self) -> None:
        """Take the record looked at, and up to its newline: nobody will serve it."""
        if self.lib is None:
            return
        cut = self.record.find(b"\n")
        try:
            os.read(FIFO_FD, cut + 1 if cut >= 0 else len(self.record))
        except BlockingIOError:
            pass


def fork_watcher(key: bytes) -> Tuple[int, int]:
    """Fork the watcher: its pid, and the write end of its ``life`` pipe for the hub to keep.

    The watcher waits for the end of file on ``life`` (the hub alone holds its write end, and
    its spares close it), then runs :func:`watch`.
    """
    life_r, life_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(life_w)
            watch(life_r, key)
        finally:
            os._exit(0)
    os.close(life_r)
    return pid, life_w


def watch(life: int, key: bytes) -> None:
    """Wait until the hub is gone; then have every relay still queued in ``in`` run the launcher.

    It keeps ``wait`` open until it is done: a relay still queued cannot then read the end of
    file and run the launcher on its own while this process signals it (a ``USR2`` that lands
    once the relay has become the launcher kills it: exit code 140). It holds neither ``in``'s
    write end nor the directory's lock, so the next hub never waits for it. It stays in the
    hub's process group: in a group of its own, stopped, the hub's death would orphan that
    group, and the kernel would hang it up (``SIGHUP``, then ``SIGCONT``).

    Records are read until no relay still has ``in`` open for writing (a relay that opened it
    before the hub died may write after), for at most :data:`SETTLE_S`; each relay is sent
    ``USR2`` as its record is read, then woken with ``URG`` until it acts (at most
    :data:`SETTLE_S` after its signal): all at once, so that one relay stopped in the queue
    holds up none behind it.
    """
    import select
    import signal
    import time

    signal.set_wakeup_fd(-1)
    close_from(3, (life, FIFO_FD, WAIT_FD))
    name("lizard-watch")
    while not select.select([life], [], [])[0]:
        pass
    deadline = time.monotonic() + SETTLE_S
    reading, data = True, b""
    woken: List[Tuple[int, int, int, bytes, float]] = []
    seen = set()
    delay = 0.0005
    while (reading and time.monotonic() < deadline) or woken:
        ready = select.select([FIFO_FD] if reading else [], [], [], delay if woken else 1.0)[0]
        lines: List[bytes] = []
        if ready:
            try:
                chunk = os.read(FIFO_FD, 4096)
                reading = bool(chunk)  # end of file: no relay can write any more
                lines = (data + chunk).split(b"\n")
                data = lines.pop()[-RECORD:]  # junk a relay of this user wrote is skipped
            except BlockingIOError:
                pass
        for line in lines:
            pid = parse(line + b"\n")
            if pid in seen:
                continue  # written twice (junk): a second USR2 could end the launcher it became
            seen.add(pid)
            relay = wake(pid, key)
            if relay is not None:
                woken.append(relay)
                delay = 0.0005
        woken = [relay for relay in woken if not settled(relay)]
        delay = min(delay * 2, 1.0)


def wake(relay: int, key: bytes) -> Optional[Tuple[int, int, int, bytes, float]]:
    """Send ``USR2`` to a queued relay of this hub's (its user, version and ``wait`` pipe).

    Returns what :func:`settled` needs, or None where there is no such relay. The ``wait``
    check means a pid reused since by a relay of another hub is never signalled.
    """
    import time

    if relay <= 0:
        return None
    try:
        proc = os.open("/proc/%d" % relay, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None  # gone already
    pidfd = open_pidfd(relay)
    try:
        if relay_argv(proc, key) is not None and waits_here(proc):
            before = relay_state(proc)[0]
            if signal_relay(relay, proc, SIGUSR2, pidfd):
                return relay, proc, pidfd, before, time.monotonic() + SETTLE_S
    except OSError:
        pass
    os.close(proc)
    if pidfd >= 0:
        os.close(pidfd)
    return None


def settled(woken: Tuple[int, int, int, bytes, float]) -> bool:
    """Whether a woken relay has acted (exited, or become the launcher); else nudge it again.

    True, with its descriptors closed, once it acted, or it cannot be signalled, or its time
    is up (a relay stopped that long acts on its ``USR2`` whenever it runs again).
    """
    import time

    relay, proc, pidfd, before, due = woken
    if not acted(proc, before):
        if time.monotonic() < due and signal_relay(relay, proc, NUDGE, pidfd):
            return False
    os.close(proc)
    if pidfd >= 0:
        os.close(pidfd)
    return True
