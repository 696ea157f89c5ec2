"""The resident guest: runs guest programs without a Python start-up per operation.

Standard library only, Python 3.8+, Linux ``/proc``. Every operation reaches the sandbox as
``sh -c <relay> lizard-guest <key> <hub> <program> <args>...``, both programs deflated and
base64 (the relay and ``BOOT`` are in ``lizard_core._guest_relay``). What holds:

- **Launcher** (what the relay runs when no hub answers): ``python3 -I -S -c BOOT <key> <hub>
  <program> <args>...`` (``BOOT`` unpacks and runs :mod:`.launcher`, which carries this program
  as text) runs ``<program>`` in this process exactly as ``python3 -I -S -c <program>
  <args>...`` would (``sys.argv``, ``__main__``, exit code). Unless a hub runs for ``key`` or
  the sandbox cannot host one, it first forks the hub (:func:`.launcher.fork_hub`), which waits
  until the program is done and its output closed: the same interpreter, so no Python
  start-up, and ready a few milliseconds after the call. A program may have the hub forked at
  a point of its own instead, as the kernel client does once its daemon is on its way.
- **Hub** (``python3 -I -S -c BOOT <key> <hub> serve``, named ``lizard-hub``): one per sandbox,
  user and ``key`` (the hash of this program and the relay), in the user's private directory
  ``$HOME/.cache/lizard-hub-<key>`` (:func:`private_dir`: ``HOME`` and every directory below it
  owned by the user, writable by nobody else, no symlinks), held by a lock so that at most one
  runs. It names itself there by an empty file ``hub.<pid>.<start time>`` and keeps no FIFO on
  disk: a relay reaches it through ``/proc/<pid>/fd``, its pipe ``in`` (fd 3, relay pids) and the
  write end of its pipe ``wait`` (fd 11, which nobody writes). Each relay pid goes to a spare
  child forked ahead of time (:mod:`._hub_child`), which becomes the relay's guest process, runs
  the program the relay carries (compiled once per program) and ends the relay. A pid is taken
  from ``in`` only as it is handed over (:mod:`._hub_queue`), and the hub's watcher process
  takes the pids still queued once the hub is gone. A child killed
  before it could ends its relay from here (exit code 128 + the signal), and a relay killed
  while its child runs (the host stopping an exec) has its child sent ``SIGHUP``, as a shell
  would, where ``pidfd_open`` exists.
- **Safe to lose.** A hub that is gone, stale (a wiped directory, a sandbox resumed without its
  processes, a reused pid, a stopped process) or of another version is never used: the relay
  checks that the name file's pid is a live process, not stopped, named ``lizard-hub`` and
  started at the named time, and otherwise runs the launcher in the same exec. A hub lost at any
  later moment before its child started the program also ends in the launcher (its watcher
  wakes a relay still queued; a relay whose pid was handed over is its child's); a relay whose
  user, limits, priority, groups, capabilities, cgroup or namespaces differ from the hub's is
  declined, and so is stdio that cannot be shared exactly.
- **Quiet.** A hub sits in its own session with ``/dev/null`` for stdio, keeps nothing else open
  (nor does its watcher, named ``lizard-watch``), and exits after :data:`IDLE_S` without a
  request, or within :data:`CHECK_S` once relays can no longer reach it (its directory or name
  file gone or replaced).
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from ._hub_child import (
    NOT_STARTED,
    WAIT_FD,
    context,
    end_relay,
    name,
    read_at,
    relay_argv,
    relay_state,
    send_status,
    spare,
    syscall,
)
from ._hub_queue import FIFO_FD, Queue, fork_watcher, libc, parse
from ._run import compiled, open_pidfd, unpack

if TYPE_CHECKING:  # annotations only: the compact program drops this block and every annotation
    from typing import Any, Dict, List, Optional, Tuple

IDLE_S = 600.0
"""A hub without requests for this long exits (the next operation starts a new one)."""
CHECK_S = 5.0
"""How often an idle hub checks that its directory is still its own."""
MAX_CODES = 8
"""Compiled programs kept (one per program text: agent, kernel client, another version's)."""
LEARN_BYTES = 64 * 1024
"""Of a relay's argv, what the hub reads to learn its program (the relay, key and both packed
programs take about 13 KiB)."""
IDLE_WAIT_S = 0.2
"""The longest a hub forked from a launcher waits for the launcher to wait before preloading."""
HUB_NAME = "lizard-hub"
PRELOAD = (
    "_socket",
    "binascii",
    "errno",
    "json",
    "selectors",
    "shutil",
    "signal",
    "stat",
    "subprocess",
    "time",
    "traceback",
    "zlib",
)
"""Modules the guest programs import: imported once by the hub, free in every child."""
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | os.O_NOFOLLOW


def home_dir() -> str:
    """``HOME``, or ``/root`` where it is unset or empty (the relay's ``${HOME:-/root}``)."""
    return os.environ.get("HOME") or "/root"


def private_dir(key: str, create: bool) -> int:
    """An fd of ``$HOME/.cache/lizard-hub-<key>``, or -1 where it is not private to this user.

    ``HOME`` (:func:`home_dir`) must be an absolute path to a directory of this user's that
    nobody else may write; ``.cache`` and the hub's directory are made (0700) if missing and
    ``create``, and must be this user's, not symlinks, and writable by nobody else (the hub's:
    0700).
    """
    home = home_dir()
    if not home.startswith("/"):
        return -1
    uid = os.getuid()
    fds: List[int] = []
    try:
        fds.append(os.open(home, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))
        for part, private in ((".cache", 0o022), ("lizard-hub-" + key, 0o077)):
            st = os.fstat(fds[-1])
            if st.st_uid != uid or st.st_mode & 0o022:
                return -1
            if create:
                try:
                    os.mkdir(part, 0o700, dir_fd=fds[-1])
                except FileExistsError:
                    pass
            fds.append(os.open(part, _DIR_FLAGS, dir_fd=fds[-1]))
            if private == 0o077:
                st = os.fstat(fds[-1])
                if st.st_uid != uid or st.st_mode & 0o077:
                    return -1
        return fds.pop()
    except OSError:
        return -1
    finally:
        for fd in fds:
            os.close(fd)


def start_time(proc: int) -> bytes:
    """A process's start time (``/proc/<pid>/stat`` field 22): with its pid, who it is."""
    return read_at(proc, "stat").rsplit(b")", 1)[1].split()[19]


def hub_pid(directory: int) -> int:
    """The pid of this directory's live hub, or 0: what the relay checks, in Python."""
    for entry in os.listdir(directory):
        parts = entry.split(".")
        if len(parts) != 3 or parts[0] != "hub":
            continue
        try:
            proc = os.open("/proc/" + parts[1], _DIR_FLAGS)
        except OSError:
            continue
        try:
            fields = read_at(proc, "stat").rsplit(b")", 1)
            alive = fields[1].split()[0] not in (b"T", b"t")
            if alive and fields[0].endswith(b"(" + HUB_NAME.encode()):
                if start_time(proc) == parts[2].encode() and os.fstat(proc).st_uid == os.getuid():
                    return int(parts[1])
        except (OSError, IndexError, ValueError):
            pass
        finally:
            os.close(proc)
    return 0


def start_hub(key: str, hub: str, codes: Dict[bytes, Any], proc: int, pidfd: int) -> None:
    """Be the hub a launcher forked (:func:`~.launcher.fork_hub`), once its launcher has exited.

    ``proc`` and ``pidfd`` name the launcher. The hub exits at once where the user's hub
    directory is not private (:func:`private_dir`) or a hub runs already. Only where this process
    may use more than one CPU does it import what its children use meanwhile (:func:`preload`),
    on a CPU the operation leaves idle. ``codes`` (the program, compiled) serve the next call of
    the same program. Where its command line (the call's request) cannot be blanked, it starts a
    fresh hub instead.
    """
    try:
        # Here rather than before the fork, off the call's path: whether this sandbox can host
        # a hub for this user and none runs yet.
        directory = private_dir(key, create=True)
        if directory < 0:
            os._exit(0)
        running = hub_pid(directory)
        os.close(directory)
        if running:
            os._exit(0)
        os.chdir("/")
        blank = blank_command_line()
        if blank and len(getattr(os, "sched_getaffinity", lambda _: ())(0)) > 1:
            wait_until_idle(proc)
            preload(proc, pidfd)
        wait_for_exit(proc, pidfd)
        if blank:
            # The first call's argv list let go (its text stays in memory: see fork_hub).
            sys.argv = ["-c", key, "serve"]
            resident = Hub(key)
            for program, codes_of in codes.items():
                # Every part compiled here, once, not in each child (a part the launcher had not
                # reached when it forked this hub is compiled now).
                try:
                    resident.codes[program] = [compiled(part) for part in codes_of]
                except Exception:  # it failed the launcher too; a child reports it
                    pass
            if resident.claim():
                resident.serve()
        else:
            exec_hub(key, hub)
    finally:
        os._exit(0)


def wait_for_exit(proc: int, pidfd: int) -> None:
    """Return once the process of ``proc`` (a ``/proc/<pid>`` descriptor) has exited.

    Through its pidfd where there is one (readable once it exits); else by looking every few
    milliseconds (its stat says ``Z`` once it exited, and reads nothing once it is reaped).
    """
    import select
    import time

    if pidfd >= 0:
        while not select.select([pidfd], [], [], 5.0)[0]:
            pass
        os.close(pidfd)
    else:
        while relay_state(proc)[1] not in (b"Z", b""):  # exited, or reaped
            time.sleep(0.005)
    os.close(proc)


def exited(proc: int, pidfd: int) -> bool:
    """Whether the process of ``proc`` (and ``pidfd``, or -1) has exited, without waiting."""
    import select

    if pidfd >= 0:
        return bool(select.select([pidfd], [], [], 0)[0])
    return relay_state(proc)[1] in (b"Z", b"")


def wait_until_idle(proc: int) -> None:
    """Return once the launcher of ``proc`` waits (twice seen not running) or is gone.

    The launcher's program runs its own start first (a command's spawn; a kernel client's
    compile of the daemon beside the daemon's own Python start): the preload then would take a
    CPU from that start. Once the launcher waits, its work runs elsewhere and a CPU is free.
    """
    import time

    end = time.monotonic() + IDLE_WAIT_S
    waiting = 0
    while waiting < 2 and time.monotonic() < end:
        state = relay_state(proc)[1]
        if not state:
            return  # reaped
        waiting = 0 if state == b"R" else waiting + 1
        time.sleep(0.002)


def blank_command_line() -> bool:
    """Overwrite this process's command line with ``lizard-hub``; False where it cannot.

    A hub forked from a launcher would otherwise show the call's request in ``ps`` for as long
    as it lives, and so would every child it forks. The kernel reads the command line from the
    process's own memory (``arg_start`` to ``arg_end`` in ``/proc/<pid>/stat``), which the
    process may write through ``/proc/self/mem``; ``sys.argv`` is a copy and stays.
    """
    try:
        with open("/proc/self/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        start, end = int(fields[45]), int(fields[46])
        text = HUB_NAME.encode() + b"\0"
        if end - start < len(text):
            return False
        mem = os.open("/proc/self/mem", os.O_RDWR | os.O_CLOEXEC)
        try:
            os.pwrite(mem, text + bytes(end - start - len(text)), start)
        finally:
            os.close(mem)
        with open("/proc/self/cmdline", "rb") as f:
            return f.read(len(text) + 1).rstrip(b"\0") == HUB_NAME.encode()
    except (OSError, ValueError, IndexError):
        return False


def preload(proc: int = -1, pidfd: int = -1) -> None:
    """Import what the guest programs import, and look up ``syscall``: once, for every child.

    Given its launcher (``proc`` and ``pidfd``, as :func:`wait_for_exit` takes them), a hub
    forked from one stops between modules once the launcher has exited: it then names itself
    first, since the next call may come at once (a relay that finds no hub runs the launcher,
    which costs more than the rest of the preload), and :meth:`Hub.serve` imports the rest
    before its first spare.
    """
    for module in PRELOAD:
        if proc >= 0 and exited(proc, pidfd):
            return
        try:
            __import__(module)
        except ImportError:
            pass
    if proc >= 0 and exited(proc, pidfd):
        return
    syscall()
    libc()


def exec_hub(key: str, hub: str) -> None:
    """Become a fresh hub: ``python3 -I -S -c BOOT <key> <hub> serve``."""
    with open("/proc/self/cmdline", "rb") as f:
        boot = f.read().split(b"\0")[4]  # this process's own ``-c`` program
    python = sys.executable.encode()
    os.execv(python, [python, b"-I", b"-S", b"-c", boot, key.encode(), hub.encode(), b"serve"])


# ── hub ──────────────────────────────────────────────────────────────────


class Hub:
    """The resident loop: relay pids in, each handed to a spare child forked ahead of time."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.directory = -1
        self.marker = ""
        self.codes: Dict[bytes, Any] = {}
        self.children: Dict[int, Tuple[int, int, int]] = {}
        self.spare: Optional[Tuple[int, int]] = None
        self.watcher = (0, -1)
        self.queue: Optional[Queue] = None
        self.own: Tuple[Any, ...] = ()

    # set-up

    def claim(self) -> bool:
        """Take the private directory: locked, stale names removed, this hub's name written."""
        import fcntl

        self.directory = private_dir(self.key, create=False)
        if self.directory < 0:
            return False
        # Held for the hub's life, above the pipes' fds (a lock on fd 3 would be lost).
        high = fcntl.fcntl(self.directory, fcntl.F_DUPFD_CLOEXEC, 20)
        os.close(self.directory)
        self.directory = high
        try:
            fcntl.flock(self.directory, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False  # another hub holds it
        name(HUB_NAME)
        # ``in``: relays write their pids to fd 3, the read end; the hub keeps the write end
        # too, so that the pipe never reads as ended. ``wait``: only the write end, fd 11, which
        # relays open for reading and children inherit; nobody writes it.
        for read_end, write_end, keep in ((FIFO_FD, 12, True), (13, WAIT_FD, False)):
            ends = os.pipe()
            for end, target in ((ends[0], read_end), (ends[1], write_end)):
                if end != target:
                    os.dup2(end, target, inheritable=False)
                    os.close(end)
            if not keep:
                os.close(read_end)
        os.set_blocking(FIFO_FD, False)
        for entry in os.listdir(self.directory):
            if entry.startswith("hub."):
                try:
                    os.unlink(entry, dir_fd=self.directory)
                except OSError:
                    pass
        me = os.open("/proc/%d" % os.getpid(), _DIR_FLAGS)
        try:
            self.marker = "hub.%d.%s" % (os.getpid(), start_time(me).decode("ascii"))
            self.own = context(me)
        finally:
            os.close(me)
        made = os.open(
            self.marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600,
            dir_fd=self.directory,
        )  # fmt: skip
        os.close(made)
        return True

    def still_ours(self) -> bool:
        """Whether relays can still reach this hub: its directory and name file in place."""
        path = os.path.join(home_dir(), ".cache", "lizard-hub-" + self.key)
        try:
            here = os.fstat(self.directory)
            there = os.lstat(path)
            os.lstat(os.path.join(path, self.marker))
        except OSError:
            return False
        return os.path.samestat(here, there)

    def retire(self) -> None:
        """Stop taking requests: new relays run the launcher; ones already queued are served."""
        try:
            os.unlink(self.marker, dir_fd=self.directory)
        except OSError:
            pass

    # the loop

    def serve(self) -> None:
        import gc
        import select
        import signal
        import time

        self.fork_watcher()
        preload()
        self.queue = Queue()
        wake_r, wake_w = os.pipe()
        for fd in (wake_r, wake_w):
            os.set_blocking(fd, False)
            os.set_inheritable(fd, False)
        signal.signal(signal.SIGCHLD, lambda signum, frame: None)
        signal.set_wakeup_fd(wake_w)
        gc.collect()
        self.fork_spare()
        last = time.monotonic()
        retired = False
        while True:
            watched = [pidfd for _, _, pidfd in self.children.values() if pidfd >= 0]
            # Retired, with no call left to finish: one last look at the queue, then out.
            timeout = 0.0 if retired and not self.children else CHECK_S
            ready = select.select([FIFO_FD, wake_r] + watched, [], [], timeout)[0]
            if wake_r in ready:
                try:
                    os.read(wake_r, 512)
                except OSError:
                    pass
            self.reap()
            if watched:
                self.hang_up(ready)
            if FIFO_FD in ready:
                last = time.monotonic()
                self.read_requests()
            if self.children:
                # The next spare is forked once the request's child is done (or on demand):
                # on a small machine the fork would compete with the child for a CPU.
                continue
            if self.spare is None and not retired:
                try:
                    self.fork_spare()
                except OSError:
                    pass  # out of processes or memory: forked on demand, or the relay falls back
            if retired:
                self.drop_spare()
                return
            if time.monotonic() - last > IDLE_S or not self.still_ours():
                self.retire()
                retired = True
                time.sleep(0.2)  # a relay that saw the name file a moment ago writes now

    def hang_up(self, ready: List[int]) -> None:
        """A relay that ended while its child runs was stopped: hang up on the child."""
        import signal

        for child, (relay, proc, pidfd) in list(self.children.items()):
            if pidfd in ready:
                os.close(pidfd)
                self.children[child] = (relay, proc, -1)
                try:
                    os.kill(child, signal.SIGHUP)  # not yet reaped: still our child
                except OSError:
                    pass

    def read_requests(self) -> None:
        """Hand every relay pid queued in ``in`` to a spare (:class:`Queue`: each exactly once)."""
        assert self.queue is not None
        while True:
            record = self.queue.peek()
            if not record:
                return
            relay = parse(record)
            if relay > 0:
                self.dispatch(relay)
            else:
                self.queue.drop()

    def dispatch(self, relay: int) -> None:
        """Hand ``relay`` to the spare (forked now if there is none); else have it fall back."""
        import signal

        assert self.queue is not None
        try:
            proc = os.open("/proc/%d" % relay, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            self.queue.drop()
            return  # the relay is gone already
        pidfd = open_pidfd(relay)
        for _ in range(2):  # a spare that died unseen (killed, out of memory) is replaced once
            try:
                if self.spare is None:
                    self.fork_spare()
            except OSError:
                break
            assert self.spare is not None
            child, jobs = self.spare
            self.spare = None
            handed = self.queue.hand_over(jobs)
            os.close(jobs)
            if not handed:
                continue
            self.children[child] = (relay, proc, pidfd)
            self.learn(proc)  # while the child works: compile a new program for later spares
            return
        self.queue.drop()
        end_relay(relay, proc, [signal.SIGUSR2], pidfd, 0.1)  # no child took it: nothing ran
        os.close(proc)
        if pidfd >= 0:
            os.close(pidfd)

    def learn(self, proc: int) -> None:
        if len(self.codes) >= MAX_CODES:
            return
        try:
            # The program comes before the request and its data, which can be megabytes.
            argv = relay_argv(proc, self.key.encode("ascii"), LEARN_BYTES)
            if argv is not None and argv[0] not in self.codes:
                self.codes[argv[0]] = unpack(argv[0])
        except Exception:  # a bad program fails in its child, where it is reported
            pass

    def fork_spare(self) -> None:
        import gc

        jobs_r, jobs_w = os.pipe()
        gc.freeze()  # children skip the hub's objects when they collect: fewer pages copied
        try:
            child = os.fork()
        except OSError:
            os.close(jobs_r)
            os.close(jobs_w)
            raise
        if child == 0:
            try:
                spare(jobs_r, self.key.encode("ascii"), self.codes, self.own)
            finally:
                os._exit(NOT_STARTED)
        os.close(jobs_r)
        os.set_inheritable(jobs_w, False)
        self.spare = (child, jobs_w)

    def fork_watcher(self) -> None:
        """Fork the process that wakes relays still queued once this hub is gone."""
        try:
            self.watcher = fork_watcher(self.key.encode("ascii"))
        except OSError:
            self.watcher = (0, -1)  # out of processes: queued relays wait as they did before

    def drop_spare(self) -> None:
        if self.spare is not None:
            os.close(self.spare[1])  # the spare reads end of file and exits
            self.spare = None

    def reap(self) -> None:
        """Reap children; a relay whose child was killed exits here as the child did."""
        while True:
            try:
                child, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if child == 0:
                return
            if self.spare is not None and child == self.spare[0]:
                os.close(self.spare[1])
                self.spare = None  # a spare that died unused: the next request forks one
                continue
            if child == self.watcher[0]:
                os.close(self.watcher[1])
                self.fork_watcher()  # killed: a hub without one could strand queued relays
                continue
            relay, proc, pidfd = self.children.pop(child, (0, -1, -1))
            if proc < 0:
                continue
            if os.WIFSIGNALED(status):  # killed before it could end its relay itself
                send_status(relay, proc, 128 + os.WTERMSIG(status), pidfd)
            os.close(proc)
            if pidfd >= 0:
                os.close(pidfd)
