"""What a hub's spare child does: wait for a relay, become its guest process, run the program.

A spare is forked ahead of time, so the fork and the generic set-up are off the request's path.
Given a relay pid it checks that the relay is one of this hub's (same user, key, and the same
limits, priority, groups, capabilities, cgroup and namespaces as the hub: :func:`context`), takes
the relay's very stdin, stdout and stderr (its fds 6, 4 and 9, copied with ``pidfd_getfd``, so
offsets, ``O_APPEND`` and sockets are the exec's own; where that call is missing, only a pipe or a
character device is reopened through ``/proc``), its environment, umask and working directory,
names itself by the call id and runs the program as ``python3 -c`` would.

It talks to the relay with signals only (the relay's traps, in ``lizard_core._guest_relay``):
:data:`STARTED` once the program is about to run; then the exit code, ``SIGUSR1`` for 0, else
one signal per set bit (:data:`BIT0` up) and :data:`EXIT_NOW`. ``SIGUSR2`` before
:data:`STARTED` means "nothing ran: run the launcher", which every doubt ends in. After the last
signal it wakes the relay with :data:`NUDGE` until the relay has acted on it. It holds the
``wait`` pipe's write end (:data:`WAIT_FD`) until it exits, so that its relay outlives it even
when the hub dies first.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from ._descriptors import close_from
from ._run import open_pidfd, run_main, unpack

if TYPE_CHECKING:  # annotations only: the compact program drops this block and every annotation
    from typing import Any, Dict, List, Optional, Tuple

RELAY_NAME = b"lizard-guest"
STDIO = (6, 4, 9)
"""The relay's copies of its stdin, stdout and stderr (its fds 0, 1 and 2 point at the ``wait``
pipe, the ``in`` pipe and ``/dev/null`` for moments, the last while it writes its pid): what
becomes the program's fds 0, 1 and 2."""
WAIT_FD = 11
"""The hub's write end of the ``wait`` pipe; every child keeps a copy until it exits, so a relay
blocked reading it sees end of file only once the hub and every child are gone."""
NOT_STARTED = 70
"""A spare's exit code when it did not start the program (its relay runs the launcher)."""
BIT0 = 35
"""The real-time signal for bit 0 of an exit code; bits 1 to 7 are the next seven."""
EXIT_NOW = 43
"""After the bits: the relay exits with them (delivered last: the highest of the numbers)."""
STARTED = 44
"""The program is about to run: from now on the relay never falls back."""
NUDGE = 23
"""``SIGURG``, sent after the last signal until the relay acts on it (:func:`settle`): a no-op trap
in the relay, and ignored by default, so harmless to the launcher the relay may have become."""
SETTLE_S = 60.0
"""How long a spare keeps waking a relay that has not acted on its last signal (one stopped or
traced at the wrong moment acts once it runs again, if that is within this time)."""
SIGUSR1 = 10
SIGUSR2 = 12
_GETFD = 438  # pidfd_getfd(2), the same number on every Linux architecture
_SAME = (
    b"Uid:",
    b"Gid:",
    b"Groups:",
    b"CapInh:",
    b"CapPrm:",
    b"CapEff:",
    b"CapBnd:",
    b"CapAmb:",
    b"NoNewPrivs:",
    b"Seccomp:",
    b"Cpus_allowed:",
    b"Mems_allowed:",
)
"""Lines of ``/proc/<pid>/status`` a relay must share with the hub for the hub to serve it."""
_NAMESPACES = ("mnt", "pid", "net", "ipc", "uts", "user", "cgroup")
_SYSCALL: List[Any] = []


def read_at(directory: int, name: str, limit: int = 0) -> bytes:
    """The file ``name`` below ``directory``: whole, or its first ``limit`` bytes."""
    fd = os.open(name, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW, dir_fd=directory)
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
    """``[program, args...]`` from a relay of this hub's user and version, else None.

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


def waits_here(proc: int) -> bool:
    """Whether the relay's fd 5 is this hub's ``wait`` pipe (:data:`WAIT_FD`, which we hold).

    Every relay opens it before it writes its pid, so a pid reused since by a process that
    waits on another hub's pipe, or on none, fails this.
    """
    try:
        there = os.stat("fd/5", dir_fd=proc)
    except OSError:
        return False
    here = os.fstat(WAIT_FD)
    return (there.st_dev, there.st_ino) == (here.st_dev, here.st_ino)


def context(proc: int) -> Tuple[Any, ...]:
    """What a process's children inherit that a hub's child cannot take over from a relay.

    Identity, groups, capabilities, limits, priority, CPU and memory placement, cgroup and
    namespaces: a relay that differs from the hub in any of them runs the launcher.
    """
    status = [line for line in read_at(proc, "status").splitlines() if line.startswith(_SAME)]
    nice = read_at(proc, "stat").rsplit(b")", 1)[1].split()[16]
    spaces = []
    for name in _NAMESPACES:
        try:
            spaces.append(os.readlink("ns/" + name, dir_fd=proc))
        except OSError:
            spaces.append("")
    root = os.stat("root", dir_fd=proc)
    return (
        status,
        nice,
        read_at(proc, "limits"),
        read_at(proc, "cgroup"),
        spaces,
        (root.st_dev, root.st_ino),
    )


def signal_relay(relay: int, proc: int, signum: int, pidfd: int = -1) -> bool:
    """Signal the relay, only while it is still the process we served; False if it is gone.

    Through its pidfd where there is one, which cannot reach another process; else a check of
    ``/proc/<relay>`` then ``kill``, a narrow pid-reuse window kept for Linux before 5.3.
    """
    import signal

    try:
        if pidfd >= 0:
            signal.pidfd_send_signal(pidfd, signum)  # type: ignore[attr-defined,unused-ignore]
        else:
            os.stat("stat", dir_fd=proc)
            os.kill(relay, signum)
    except OSError:
        return False
    return True


def relay_state(proc: int) -> Tuple[bytes, bytes]:
    """A process's name and state letter (``/proc/<pid>/stat``); empty once it is reaped."""
    try:
        stat = read_at(proc, "stat")
    except OSError:
        return b"", b""
    head, _, tail = stat.rpartition(b")")
    return head.partition(b"(")[2], tail[1:2]


def acted(proc: int, name: bytes) -> bool:
    """Whether a signalled relay has acted: exited, or run the launcher (a new name)."""
    now, state = relay_state(proc)
    return now != name or state in (b"", b"Z", b"X")


def settle(relay: int, proc: int, pidfd: int, name: bytes, within: float) -> None:
    """Wake the relay until it acts on its last signal: exits, or becomes the launcher.

    A shell's handler only notes a signal; the trap runs between commands. One that lands after
    that check and before the relay's blocking ``read`` starts wakes nothing, and the relay would
    wait for good (under load, a few calls in a thousand). :data:`NUDGE` interrupts that read, so
    the noted trap runs. ``name`` is the relay's before the signal: a new one means it ran the
    launcher. At most ``within`` seconds.
    """
    import select
    import time

    deadline = time.monotonic() + within
    delay = 0.0005
    while True:
        if pidfd >= 0:
            select.select([pidfd], [], [], delay)  # readable once the relay has exited
        else:
            time.sleep(delay)
        if acted(proc, name):
            return
        if time.monotonic() > deadline or not signal_relay(relay, proc, NUDGE, pidfd):
            return
        delay = min(delay * 2, 1.0)


def end_relay(relay: int, proc: int, signals: List[int], pidfd: int, within: float) -> None:
    """Send the relay ``signals`` in order, then :func:`settle` it."""
    name = relay_state(proc)[0]
    for signum in signals:
        if not signal_relay(relay, proc, signum, pidfd):
            return
    settle(relay, proc, pidfd, name, within)


def send_status(relay: int, proc: int, status: int, pidfd: int = -1, within: float = 0.1) -> None:
    """Make the relay exit with ``status`` (0 to 255)."""
    bits = [BIT0 + bit for bit in range(8) if status >> bit & 1]
    end_relay(relay, proc, bits + [EXIT_NOW] if status else [SIGUSR1], pidfd, within)


def spare(jobs: int, key: bytes, codes: Dict[bytes, Any], own: Tuple[Any, ...]) -> None:
    """The spare's whole life: one job from ``jobs`` (a relay pid), then exit."""
    import signal

    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    os.setpgid(0, 0)
    close_from(3, (jobs, WAIT_FD))
    name("lizard-spare")
    rehearse()
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
    # Opened after /proc/<relay>: if that pid was reused in between, the reads below fail.
    pidfd = open_pidfd(relay)
    code: Any = None
    argv: Optional[List[str]] = None
    try:
        found = relay_argv(proc, key)
        if found is not None and waits_here(proc) and context(proc) == own:
            code = codes.get(found[0])
            if code is None:
                code = unpack(found[0])
            if attach(relay, proc, pidfd):
                argv = ["-c"] + [os.fsdecode(arg) for arg in found[1:]]
    except Exception:
        argv = None
    if argv is None or not signal_relay(relay, proc, STARTED, pidfd):
        signal.signal(signal.SIGHUP, signal.SIG_IGN)  # see below
        end_relay(relay, proc, [SIGUSR2], pidfd, SETTLE_S)
        os._exit(NOT_STARTED)
    name(argv[1][:15])
    me = os.getpid()
    status = run_main(code, argv)
    if os.getpid() != me:
        os._exit(status)  # a fork of the program's that returned: the relay is not its to end
    # Done: no longer the call's process for whoever ends calls by name (the agent's ``kill``),
    # since a signal now would make the hub report a second status.
    name("lizard-ending")
    # The exec ends once the relay exited and its stdout and stderr are closed: close ours
    # first, so that it need not wait for this process to be torn down.
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    # The hub hangs up on a child whose relay has ended, which this one now waits for.
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    send_status(relay, proc, status, pidfd, SETTLE_S)
    os._exit(status)


def name(text: str) -> None:
    """This process's name in ``ps`` and ``/proc/<pid>/comm`` (15 bytes)."""
    comm = os.open("/proc/self/comm", os.O_WRONLY)
    try:
        os.write(comm, text.encode("ascii", "replace")[:15])
    finally:
        os.close(comm)


def rehearse() -> None:
    """Touch, before a job arrives, what a job will touch.

    The pages a fork shares with the hub are copied on first write (reference counts included),
    so this moves that copying off the request's path. Only the standard library's: no program
    is run here, not even its top level.
    """
    import json

    json.loads(json.dumps({"t": "pid", "pid": 1, "e": [None, 1.5, "x", True]}))
    dict(os.environb)
    # A thread started and joined leaves its stack in the C library's cache for a file
    # operation's heartbeat thread; a pipe and a poll touch what a command's supervision will.
    import select
    import threading

    thread = threading.Thread(target=int)
    thread.start()
    thread.join()
    ends = os.pipe()
    poller = select.poll()
    poller.register(ends[0], select.POLLIN)
    poller.poll(0)
    for fd in ends:
        os.close(fd)


def syscall() -> Any:
    """The C library's ``syscall``, looked up once (the hub does it before forking), or None."""
    if not _SYSCALL:
        try:
            import ctypes

            _SYSCALL.append(ctypes.CDLL(None).syscall)
        except (ImportError, AttributeError, OSError):
            _SYSCALL.append(None)  # no ctypes here: stdio is reopened where that is exact
    return _SYSCALL[0]


def take_fd(pidfd: int, proc: int, fd: int, mode: int) -> int:
    """The relay's ``fd``, the very same open file (``pidfd_getfd``), else reopened if safe."""
    call = syscall()
    if pidfd >= 0 and call is not None:
        got = call(_GETFD, pidfd, fd, 0)
        if got >= 0:
            os.set_inheritable(got, False)
            return int(got)
    import stat

    # A new open file of the same object: only right where there is no offset, no O_APPEND and
    # no other state to share, i.e. a pipe or a character device.
    mode_bits = os.stat("fd/%d" % fd, dir_fd=proc).st_mode
    if not (stat.S_ISFIFO(mode_bits) or stat.S_ISCHR(mode_bits)):
        raise OSError("fd %d of the relay cannot be shared" % fd)
    return os.open("fd/%d" % fd, mode | os.O_CLOEXEC, dir_fd=proc)


def attach(relay: int, proc: int, pidfd: int) -> bool:
    """Take the relay's stdio, environment, umask and working directory; False if it cannot."""
    fds = []
    try:
        for index, mode in enumerate((os.O_RDONLY, os.O_WRONLY, os.O_WRONLY)):
            fds.append(take_fd(pidfd, proc, STDIO[index], mode))
    except OSError:
        for fd in fds:
            os.close(fd)
        return False
    env = {}
    for item in read_at(proc, "environ").split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep and key:
            env[key] = value
    for line in read_at(proc, "status").splitlines():
        if line.startswith(b"Umask:"):
            os.umask(int(line.split()[1], 8))
    os.chdir("/proc/%d/cwd" % relay)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    # Usually the hub's own environment already: change only what differs (clear() is slow).
    current = os.environb
    for key in [key for key in current if key not in env]:
        del current[key]
    for key, value in env.items():
        if current.get(key) != value:
            current[key] = value
    return True
