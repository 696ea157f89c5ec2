"""What a hub's spare child does: wait for a relay, become its guest process, run the program.

A spare is forked ahead of time, so the fork and the generic set-up are off the request's path.
Given a relay pid it reads the relay's argv, environment, umask and working directory from
``/proc``, takes the relay's stdin, stdout (the relay's fd 4 copy) and stderr, names itself by
the call id and runs the program as ``python3 -c`` would. It ends the relay itself: ``SIGUSR1``
(exit 0) or ``SIGALRM`` (exit 1) once the program ended, ``SIGUSR2`` (run the launcher) when it
could not start the program, so nothing ran. It holds the ``wait`` FIFO (:data:`WAIT_FD`) open
until it exits, so that its relay outlives it even when the hub dies first.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: the compact program drops this block and every annotation
    from typing import Any, Dict, List, Optional, Tuple

RELAY_NAME = b"lizard-guest"
STDOUT_FD = 4
"""The relay's copy of its stdout (its fd 1 points at the FIFO while it writes its pid)."""
WAIT_FD = 11
"""The hub's end of the ``wait`` FIFO; every child keeps a copy until it exits, so a relay
blocked reading it sees end of file only once the hub and every child are gone."""
CANNOT_ATTACH = 71
"""A spare's exit code when the relay's stdout cannot be reopened: the hub gives up."""
NOT_STARTED = 70
"""A spare's exit code when it could not start the program (the relay runs the launcher)."""


def close_from(lowest: int, keep: Tuple[int, ...] = ()) -> None:
    """Close every descriptor from ``lowest`` up, except ``keep``."""
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd >= lowest and fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass


def read_at(directory: int, name: str, limit: int = 0) -> bytes:
    """The file ``name`` below ``directory``: whole, or its first ``limit`` bytes."""
    fd = os.open(name, os.O_RDONLY | os.O_CLOEXEC, dir_fd=directory)
    try:
        chunks: List[bytes] = []
        size = 0
        while not limit or size < limit:
            chunk = os.read(fd, min(1 << 20, limit - size) if limit else 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def relay_argv(proc: int, key: bytes, limit: int = 0) -> Optional[List[bytes]]:
    """``[program, args...]`` from a relay of this hub's version, else None.

    With ``limit``, only the argv within its first ``limit`` bytes, whole items only.
    """
    if os.fstat(proc).st_uid != os.getuid():
        return None
    # The last item is the empty one after the final NUL, or one the limit cut.
    argv = read_at(proc, "cmdline", limit).split(b"\0")[:-1]
    # sh -c <relay> lizard-guest <key> <hub> <program> <args>...
    if len(argv) < 8 or argv[1] != b"-c" or argv[3] != RELAY_NAME or argv[4] != key:
        return None
    return argv[6:]


def unpack(program: bytes) -> Any:
    """A program as it travels (deflated, base64), compiled."""
    import binascii
    import zlib

    return compile(zlib.decompress(binascii.a2b_base64(program)), "<string>", "exec")


def signal_relay(relay: int, proc: int, signum: int) -> None:
    """Signal the relay, but only while ``/proc/<relay>`` is still the process we served."""
    try:
        os.stat("stat", dir_fd=proc)
        os.kill(relay, signum)
    except OSError:
        pass


def spare(jobs: int, key: bytes, codes: Dict[bytes, Any]) -> None:
    """The spare's whole life: one job from ``jobs`` (a relay pid), then exit."""
    import signal

    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    os.setpgid(0, 0)
    close_from(3, (jobs, WAIT_FD))
    rehearse(codes)
    line = b""
    while not line.endswith(b"\n"):
        chunk = os.read(jobs, 32)
        if not chunk:
            os._exit(0)  # the hub is gone or retired this spare
        line += chunk
    os.close(jobs)
    relay = int(line)
    try:
        proc = os.open("/proc/%d" % relay, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        os._exit(0)  # the relay is gone
    code: Any = None
    argv: Optional[List[str]] = None
    try:
        found = relay_argv(proc, key)
        if found is not None:
            code = codes.get(found[0])
            if code is None:
                code = unpack(found[0])
            if not attach(relay, proc):
                signal_relay(relay, proc, signal.SIGUSR2)
                os._exit(CANNOT_ATTACH)
            argv = ["-c"] + [os.fsdecode(arg) for arg in found[1:]]
            comm = os.open("/proc/self/comm", os.O_WRONLY)
            try:
                os.write(comm, argv[1][:15].encode("ascii", "replace"))
            finally:
                os.close(comm)
    except Exception:
        argv = None
    if argv is None:
        signal_relay(relay, proc, signal.SIGUSR2)
        os._exit(NOT_STARTED)
    status = run_main(code, argv)
    # The exec ends once the relay exited and its stdout and stderr are closed: close ours
    # first, so that it need not wait for this process to be torn down.
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    signal_relay(relay, proc, signal.SIGUSR1 if status == 0 else signal.SIGALRM)
    os._exit(status)


def rehearse(codes: Dict[bytes, Any]) -> None:
    """Touch, before a job arrives, what a job will touch.

    The pages a fork shares with the hub are copied on first write (reference counts included),
    so this moves that copying off the request's path. Module bodies only: ``__name__`` is not
    ``"__main__"``, so nothing runs.
    """
    import builtins
    import json

    for code in codes.values():
        try:
            exec(code, {"__name__": "__rehearsal__", "__builtins__": builtins})
        except Exception:
            pass
    json.loads(json.dumps({"t": "pid", "pid": 1, "e": [None, 1.5, "x", True]}))
    dict(os.environb)
    # A thread started and joined leaves its stack in the C library's cache for the job's
    # heartbeat thread; a pipe and a selector touch what a command's supervision will.
    import selectors
    import threading

    thread = threading.Thread(target=int)
    thread.start()
    thread.join()
    ends = os.pipe()
    with selectors.DefaultSelector() as selector:
        selector.register(ends[0], selectors.EVENT_READ)
        selector.select(0)
    for fd in ends:
        os.close(fd)


def attach(relay: int, proc: int) -> bool:
    """Take the relay's stdio, environment, umask and working directory; False if stdout fails."""
    fds = []
    try:
        fds.append(os.open("fd/0", os.O_RDONLY | os.O_CLOEXEC, dir_fd=proc))
        fds.append(os.open("fd/%d" % STDOUT_FD, os.O_WRONLY | os.O_CLOEXEC, dir_fd=proc))
        fds.append(os.open("fd/2", os.O_WRONLY | os.O_CLOEXEC, dir_fd=proc))
    except OSError:
        return False
    env = {}
    for item in read_at(proc, "environ").split(b"\0"):
        name, sep, value = item.partition(b"=")
        if sep and name:
            env[name] = value
    for line in read_at(proc, "status").splitlines():
        if line.startswith(b"Umask:"):
            os.umask(int(line.split()[1], 8))
    os.chdir("/proc/%d/cwd" % relay)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    # Usually the hub's own environment already: change only what differs (clear() is slow).
    current = os.environb
    for name in [name for name in current if name not in env]:
        del current[name]
    for name, value in env.items():
        if current.get(name) != value:
            current[name] = value
    return True


def run_main(code: Any, argv: List[str]) -> int:
    """Run ``code`` as ``python -c`` runs its program; its exit code, output flushed."""
    import builtins

    sys.argv = argv
    status = 0
    try:
        exec(code, {"__name__": "__main__", "__builtins__": builtins, "__doc__": None})
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
