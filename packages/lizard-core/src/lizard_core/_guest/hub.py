"""The resident guest: runs guest programs without a Python start-up per operation.

Standard library only, Python 3.8+, Linux ``/proc``. Every operation reaches the sandbox as
``sh -c <relay> lizard-guest <key> <hub> <program> <args>...``, both programs deflated and
base64 (the relay and ``BOOT`` are in ``lizard_core._guest_relay``). What holds:

- **Launcher** (what the relay runs when no hub answers): ``python3 -I -S -c BOOT <key> <hub>
  <program> <args>...`` (``BOOT`` unpacks and runs this program) runs ``<program>`` in this
  process exactly as ``python3 -I -S -c <program> <args>...`` would (``sys.argv``, ``__main__``,
  exit code), then, its output closed, starts a hub for ``key`` unless one runs or the sandbox
  cannot host one.
- **Hub** (``python3 -I -S -c BOOT <key> <hub> serve``): one per sandbox, user and ``key`` (the
  hash of this program and the relay), in the private directory ``$TMPDIR/.lizard-hub-<key>``
  (``/tmp`` without ``TMPDIR``), held by a lock so that at most one runs. It reads relay pids
  from the FIFO ``in`` (its fd 3; ``pid`` names the hub) and hands each to a spare child forked
  ahead of time (:mod:`._hub_child`), which becomes the relay's guest process, runs the program
  the relay carries (compiled once per program) and ends the relay. A child killed before it
  could ends its relay from here (``SIGALRM``).
- **Safe to lose.** A hub that is gone, stale (a wiped directory, a sandbox resumed without its
  processes, a reused pid, a stopped process) or of another version is never used: the relay
  checks that the pid file names a live process, not stopped, whose fd 3 is the FIFO, and
  otherwise runs the launcher in the same exec. A hub whose child cannot reopen a relay's
  stdout (the platform does not give it a pipe) writes ``off`` and exits: from then on every
  operation runs the launcher.
- **Quiet.** A hub sits in its own session with ``/dev/null`` for stdio, keeps nothing else open,
  and exits after :data:`IDLE_S` without a request, or within :data:`CHECK_S` once relays can no
  longer reach it (its directory, FIFO or pid file replaced).
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from ._hub_child import (
    CANNOT_ATTACH,
    WAIT_FD,
    close_from,
    relay_argv,
    run_main,
    signal_relay,
    spare,
    unpack,
)

if TYPE_CHECKING:  # annotations only: the compact program drops this block and every annotation
    from typing import Any, Dict, Optional, Tuple

IDLE_S = 600.0
"""A hub without requests for this long exits (the next operation starts a new one)."""
CHECK_S = 5.0
"""How often an idle hub checks that its directory is still its own."""
MAX_CODES = 8
"""Compiled programs kept (one per program text: agent, kernel client, another version's)."""
LEARN_BYTES = 64 * 1024
"""Of a relay's argv, what the hub reads to learn its program (the relay, key and both packed
programs take about 13 KiB)."""
FIFO_FD = 3
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


def hub_dir(key: str) -> str:
    return os.path.join(os.environ.get("TMPDIR") or "/tmp", ".lizard-hub-" + key)


def hub_pid(directory: str) -> int:
    """The pid of this directory's live hub, or 0: what the relay checks, in Python."""
    try:
        with open(os.path.join(directory, "pid")) as f:
            pid = int(f.read().split()[0])
        fifo = os.stat(os.path.join(directory, "in"))
        held = os.stat("/proc/%d/fd/%d" % (pid, FIFO_FD))
    except (OSError, ValueError, IndexError):
        return 0
    return pid if os.path.samestat(fifo, held) and fifo.st_uid == os.getuid() else 0


# ── launcher ─────────────────────────────────────────────────────────────


def launch() -> None:
    """Run the program in this process, then start a hub when none runs."""
    key, hub, program = sys.argv[1], sys.argv[2], sys.argv[3]
    status = run_main(unpack(program.encode("ascii")), ["-c"] + sys.argv[4:])
    # The hub starts once the program is done and its output closed, so that its own start-up
    # (a Python start and its imports) does not compete with this operation for the CPU.
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    directory = hub_dir(key)
    if not os.path.exists(os.path.join(directory, "off")) and not hub_pid(directory):
        try:
            spawn_hub(key, hub)
        except OSError:
            pass  # no hub: later operations run here too, as before
    os._exit(status)


def spawn_hub(key: str, hub: str) -> None:
    """Start ``serve`` detached: its own session, stdio on /dev/null, no other descriptors."""
    pid = os.fork()
    if pid:
        os.waitpid(pid, 0)
        return
    try:
        os.setsid()
        if os.fork():
            os._exit(0)
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        close_from(3)
        os.chdir("/")
        with open("/proc/self/cmdline", "rb") as f:
            boot = f.read().split(b"\0")[4]  # this process's own ``-c`` program
        python = sys.executable.encode()
        os.execv(python, [python, b"-I", b"-S", b"-c", boot, key.encode(), hub.encode(), b"serve"])
    finally:
        os._exit(127)


# ── hub ──────────────────────────────────────────────────────────────────


class Hub:
    """The resident loop: relay pids in, each handed to a spare child forked ahead of time."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.directory = hub_dir(key)
        self.codes: Dict[bytes, Any] = {}
        self.children: Dict[int, Tuple[int, int]] = {}
        self.spare: Optional[Tuple[int, int]] = None
        self.pending = b""

    # set-up

    def claim(self) -> bool:
        """Take the directory: private, locked, FIFOs ``in`` (fd 3) and ``wait``, the pid file."""
        import fcntl

        try:
            os.mkdir(self.directory, 0o700)
        except FileExistsError:
            pass
        st = os.lstat(self.directory)
        if st.st_uid != os.getuid() or st.st_mode & 0o077 or not os.path.isdir(self.directory):
            return False
        if os.path.islink(self.directory):
            return False
        lock = os.open(os.path.join(self.directory, "lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False  # another hub holds it
        # Held for the hub's life, above the FIFO's fd 3 (a lock taken on fd 3 would be lost).
        fcntl.fcntl(lock, fcntl.F_DUPFD_CLOEXEC, 10)
        os.close(lock)
        # Relays block reading ``wait``, which nobody writes: they wake on a signal, or on the
        # end of file once the hub and its children (the write ends) are all gone.
        self.fresh_fifo("wait", WAIT_FD)
        self.fresh_fifo("in", FIFO_FD)
        pid_temp = os.path.join(self.directory, "pid.%d" % os.getpid())
        with open(pid_temp, "w") as f:
            f.write("%d\n" % os.getpid())
        os.rename(pid_temp, os.path.join(self.directory, "pid"))
        return True

    def fresh_fifo(self, name: str, target: int) -> None:
        path = os.path.join(self.directory, name)
        temp = path + ".%d" % os.getpid()
        os.mkfifo(temp, 0o600)
        fd = os.open(temp, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
        if fd != target:
            os.dup2(fd, target, inheritable=False)
            os.close(fd)
        os.rename(temp, path)

    def still_ours(self) -> bool:
        """Whether relays can still reach this hub: its FIFO in place and its pid file intact."""
        return hub_pid(self.directory) == os.getpid()

    def retire(self) -> None:
        """Stop taking requests: new relays run the launcher; ones already queued are served."""
        try:
            if hub_pid(self.directory) == os.getpid():
                os.unlink(os.path.join(self.directory, "pid"))
        except OSError:
            pass

    def give_up(self) -> None:
        """The platform does not let a hub serve relays: say so, so that none is started again."""
        try:
            with open(os.path.join(self.directory, "off"), "w") as f:
                f.write("a relay's stdout cannot be reopened through /proc\n")
        except OSError:
            pass
        self.retire()

    # the loop

    def serve(self) -> None:
        import gc
        import select
        import signal
        import time

        for name in PRELOAD:
            try:
                __import__(name)
            except ImportError:
                pass
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
            ready = select.select([FIFO_FD, wake_r], [], [], CHECK_S)[0]
            if wake_r in ready:
                try:
                    os.read(wake_r, 512)
                except OSError:
                    pass
            if self.reap():
                return
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
                time.sleep(0.2)  # a relay that saw the pid file a moment ago writes now

    def read_requests(self) -> None:
        """Hand every complete line in the FIFO (a relay pid) to a spare."""
        try:
            self.pending += os.read(FIFO_FD, 4096)
        except BlockingIOError:
            return
        lines = self.pending.split(b"\n")
        self.pending = lines.pop()[-64:]
        for line in lines:
            try:
                relay = int(line)
            except ValueError:
                continue
            if relay > 0:
                self.dispatch(relay)

    def dispatch(self, relay: int) -> None:
        """Hand ``relay`` to the spare (forked now if there is none); else have it fall back."""
        import signal

        try:
            proc = os.open("/proc/%d" % relay, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            return  # the relay is gone already
        for _ in range(2):  # a spare that died unseen (killed, out of memory) is replaced once
            try:
                if self.spare is None:
                    self.fork_spare()
            except OSError:
                break
            assert self.spare is not None
            child, jobs = self.spare
            self.spare = None
            try:
                os.write(jobs, b"%d\n" % relay)
            except OSError:
                os.close(jobs)
                continue
            os.close(jobs)
            self.children[child] = (relay, proc)
            self.learn(proc)  # while the child works: compile a new program for later spares
            return
        signal_relay(relay, proc, signal.SIGUSR2)  # no child took it: nothing ran
        os.close(proc)

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
                spare(jobs_r, self.key.encode("ascii"), self.codes)
            finally:
                os._exit(70)
        os.close(jobs_r)
        os.set_inheritable(jobs_w, False)
        self.spare = (child, jobs_w)

    def drop_spare(self) -> None:
        if self.spare is not None:
            os.close(self.spare[1])  # the spare reads end of file and exits
            self.spare = None

    def reap(self) -> bool:
        """Reap children; a relay whose child was killed is ended here. True: give up."""
        import signal

        while True:
            try:
                child, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return False
            if child == 0:
                return False
            if self.spare is not None and child == self.spare[0]:
                os.close(self.spare[1])
                self.spare = None  # a spare that died unused: the next request forks one
                continue
            relay, proc = self.children.pop(child, (0, -1))
            if proc < 0:
                continue
            if os.WIFSIGNALED(status):  # killed before it could end its relay itself
                signal_relay(relay, proc, signal.SIGALRM)
            os.close(proc)
            if os.WIFEXITED(status) and os.WEXITSTATUS(status) == CANNOT_ATTACH:
                self.give_up()
                self.drop_spare()
                return True


def main() -> None:
    if sys.argv[3:] == ["serve"]:
        hub = Hub(sys.argv[1])
        if hub.claim():
            hub.serve()
        os._exit(0)
    launch()


if __name__ == "__main__":
    main()
