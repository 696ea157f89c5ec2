"""The resident guest: runs guest programs without a Python start-up per operation.

Standard library only, Python 3.8+, Linux ``/proc``. Every operation reaches the sandbox as
``sh -c <relay> lizard-guest <key> <this program> <program> <args>...`` (the relay is
``lizard_core._guest_relay.RELAY``). What holds:

- **Launcher** (what the relay runs when no hub answers): ``python3 -I -S -c <this program>
  <key> <this program> <program> <args>...`` first starts a hub for ``key`` unless one runs or
  the sandbox cannot host one, then runs ``<program>`` in this process exactly as
  ``python3 -I -S -c <program> <args>...`` would (``sys.argv``, ``__main__``, exit code).
- **Hub** (``python3 -I -S -c <this program> serve <key>``): one per sandbox, user and ``key``
  (the hash of this program and the relay), in the private directory
  ``$TMPDIR/.lizard-hub-<key>`` (``/tmp`` without ``TMPDIR``), held by a lock so that at most one
  runs. It reads relay pids from the FIFO ``in`` (its fd 3; ``pid`` names the hub), and for each
  relay forks a child that takes the relay's stdin, stdout, stderr, environment, working
  directory and umask from ``/proc``, names itself by the call id (``/proc/<pid>/comm``, the
  first 15 characters, for ``op_signal``) and runs the program the relay carries (compiled once
  per program text). When the child exits the relay is told to exit (``SIGUSR1``: code 0, else
  ``SIGALRM``: code 1); a relay it cannot serve is told to run the launcher (``SIGUSR2``).
- **Safe to lose.** A hub that is gone, stale (a wiped directory, a sandbox resumed without its
  processes, a reused pid) or of another version is never used: the relay checks that the pid
  file names a live process whose fd 3 is the FIFO, and otherwise runs the launcher in the same
  exec. A hub that cannot reopen a relay's stdout (the platform does not give it a pipe) writes
  ``off`` and exits: from then on every operation runs the launcher.
- **Quiet.** A hub sits in its own session with ``/dev/null`` for stdio, keeps nothing else open,
  and exits after :data:`IDLE_S` without a request or once its directory is no longer its own.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: the compact program drops this block and every annotation
    from typing import Any, Dict, List, Optional, Tuple

IDLE_S = 600.0
"""A hub without requests for this long exits (the next operation starts a new one)."""
CHECK_S = 5.0
"""How often an idle hub checks that its directory is still its own."""
MAX_CODES = 8
"""Compiled programs kept (one per program text: agent, kernel client, another version's)."""
RELAY_NAME = b"lizard-guest"
FIFO_FD = 3
STDOUT_FD = 4
"""The relay's copy of its stdout (its fd 1 points at the FIFO while it writes its pid)."""
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
    """Start a hub when none runs, then run the program in this process."""
    key, hub_text, program = sys.argv[1], sys.argv[2], sys.argv[3]
    directory = hub_dir(key)
    if not os.path.exists(os.path.join(directory, "off")) and not hub_pid(directory):
        try:
            spawn_hub(hub_text, key)
        except OSError:
            pass  # no hub: this and later operations run here, as before
    code = compile(program, "<string>", "exec")
    run_main(code, ["-c"] + sys.argv[4:])


def spawn_hub(hub_text: str, key: str) -> None:
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
        os.execv(sys.executable, [sys.executable, "-I", "-S", "-c", hub_text, "serve", key])
    finally:
        os._exit(127)


def close_from(lowest: int, keep: Tuple[int, ...] = ()) -> None:
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd >= lowest and fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass


def run_main(code: Any, argv: List[str]) -> None:
    """Run ``code`` as ``python -c`` runs its program, then leave with its exit code."""
    import builtins

    sys.argv = argv
    status = 0
    try:
        exec(code, {"__name__": "__main__", "__builtins__": builtins, "__doc__": None})
    except SystemExit as stop:
        if stop.code is None:
            status = 0
        elif isinstance(stop.code, int):
            status = stop.code
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
    os._exit(status & 0xFF)


# ── hub ──────────────────────────────────────────────────────────────────


class Hub:
    """The resident loop: relay pids in, one forked child per relay, relays released."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.directory = hub_dir(key)
        # The key is the hash of this program and the relay: the same key, the same protocol.
        self.expected = [RELAY_NAME, key.encode("ascii")]
        self.codes = {}  # type: Dict[bytes, Any]
        self.children = {}  # type: Dict[int, Tuple[int, int]]
        self.pending = b""
        self.fifo = None  # type: Optional[os.stat_result]

    # set-up

    def claim(self) -> bool:
        """Take the directory: private, locked, with a fresh FIFO on fd 3 and the pid file."""
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
        fifo = os.path.join(self.directory, "in")
        temp = fifo + ".%d" % os.getpid()
        os.mkfifo(temp, 0o600)
        fd = os.open(temp, os.O_RDWR | os.O_NONBLOCK)
        if fd != FIFO_FD:
            os.dup2(fd, FIFO_FD, inheritable=False)
            os.close(fd)
        os.rename(temp, fifo)
        self.fifo = os.fstat(FIFO_FD)
        pid_temp = os.path.join(self.directory, "pid.%d" % os.getpid())
        with open(pid_temp, "w") as f:
            f.write("%d\n" % os.getpid())
        os.rename(pid_temp, os.path.join(self.directory, "pid"))
        return True

    def still_ours(self) -> bool:
        try:
            return os.path.samestat(os.stat(os.path.join(self.directory, "in")), self.fifo)
        except OSError:
            return False

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
                f.write("stdout cannot be reopened through /proc\n")
        except OSError:
            pass
        self.retire()

    # the loop

    def serve(self) -> None:
        import select
        import signal
        import time

        for name in PRELOAD:
            try:
                __import__(name)
            except ImportError:
                pass
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_r, False)
        os.set_blocking(wake_w, False)
        signal.signal(signal.SIGCHLD, lambda signum, frame: None)
        signal.set_wakeup_fd(wake_w)
        last = time.monotonic()
        retired = False
        while True:
            ready = select.select([FIFO_FD, wake_r], [], [], CHECK_S)[0]
            if wake_r in ready:
                try:
                    os.read(wake_r, 512)
                except OSError:
                    pass
            self.reap()
            if FIFO_FD in ready:
                last = time.monotonic()
                if not self.read_requests(wake_r, wake_w):
                    retired = True
            if self.children:
                continue
            if retired:
                return
            if time.monotonic() - last > IDLE_S or not self.still_ours():
                self.retire()
                retired = True
                time.sleep(0.2)  # a relay that saw the pid file a moment ago writes now

    def read_requests(self, *keep: int) -> bool:
        """Serve every complete line in the FIFO; False once the platform refuses a hub."""
        try:
            self.pending += os.read(FIFO_FD, 4096)
        except BlockingIOError:
            return True
        lines = self.pending.split(b"\n")
        self.pending = lines.pop()[-64:]
        for line in lines:
            try:
                relay = int(line)
            except ValueError:
                continue
            if relay > 0 and not self.start(relay, keep):
                self.give_up()
                return False
        return True

    def start(self, relay: int, keep: Tuple[int, ...]) -> bool:
        """Fork a child for ``relay``; False only when its stdout cannot be reopened at all."""
        import signal

        try:
            proc = os.open("/proc/%d" % relay, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            return True  # gone already
        fds = []  # type: List[int]
        try:
            argv, env, umask = self.describe(proc)
            if argv is None:
                self.release(relay, proc, signal.SIGUSR2)
                return True
            try:
                for fd, mode in ((0, os.O_RDONLY), (STDOUT_FD, os.O_WRONLY), (2, os.O_WRONLY)):
                    fds.append(os.open("fd/%d" % fd, mode | os.O_CLOEXEC, dir_fd=proc))
            except OSError:
                self.release(relay, proc, signal.SIGUSR2)
                return False
            code = self.code(argv[3])
            child = os.fork()
            if child == 0:
                self.child(relay, fds, env, umask, code, argv[4:], keep)
            self.children[child] = (relay, proc)
            proc = -1
        except Exception:
            if proc >= 0:
                self.release(relay, proc, signal.SIGUSR2)
                proc = -1
        finally:
            for fd in fds:
                os.close(fd)
        return True

    def describe(self, proc: int) -> Tuple[Any, Dict[bytes, bytes], int]:
        """The relay's argv, environment and umask, or None for argv when it is not ours."""
        if os.fstat(proc).st_uid != os.getuid():
            return None, {}, 0
        argv = read_at(proc, "cmdline").split(b"\0")[3:-1]  # after ``sh -c <relay>``
        if argv[:2] != self.expected or len(argv) < 5:
            return None, {}, 0
        env = {}
        for item in read_at(proc, "environ").split(b"\0"):
            name, sep, value = item.partition(b"=")
            if sep and name:
                env[name] = value
        umask = 0o022
        for line in read_at(proc, "status").splitlines():
            if line.startswith(b"Umask:"):
                umask = int(line.split()[1], 8)
        return argv, env, umask

    def code(self, text: bytes) -> Any:
        code = self.codes.get(text)
        if code is None:
            if len(self.codes) >= MAX_CODES:
                self.codes.clear()
            code = self.codes[text] = compile(text, "<string>", "exec")
        return code

    def child(
        self,
        relay: int,
        fds: List[int],
        env: Dict[bytes, bytes],
        umask: int,
        code: Any,
        args: List[bytes],
        keep: Tuple[int, ...],
    ) -> None:
        """In the forked child: become the relay's guest process and run the program."""
        import signal

        try:
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            os.setpgid(0, 0)
            os.chdir("/proc/%d/cwd" % relay)
            for target, fd in enumerate(fds):
                os.dup2(fd, target)
            close_from(3)
            os.umask(umask)
            os.environb.clear()
            os.environb.update(env)
            call = args[0].decode("ascii", "replace")
            with open("/proc/self/comm", "w") as comm:
                comm.write(call[:15])
            argv = ["-c"] + [os.fsdecode(arg) for arg in args]
        except BaseException:
            os._exit(70)
        run_main(code, argv)

    def reap(self) -> None:
        import signal

        while self.children:
            try:
                child, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if child == 0:
                return
            relay, proc = self.children.pop(child, (0, -1))
            if proc >= 0:
                ok = os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
                self.release(relay, proc, signal.SIGUSR1 if ok else signal.SIGALRM)

    @staticmethod
    def release(relay: int, proc: int, signum: int) -> None:
        """Signal the relay, but only while ``/proc/<relay>`` is still the process we served."""
        try:
            os.stat("stat", dir_fd=proc)
            os.kill(relay, signum)
        except OSError:
            pass
        finally:
            os.close(proc)


def read_at(directory: int, name: str) -> bytes:
    fd = os.open(name, os.O_RDONLY | os.O_CLOEXEC, dir_fd=directory)
    try:
        chunks = []
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
    finally:
        os.close(fd)


def main() -> None:
    if sys.argv[1:2] == ["serve"] and len(sys.argv) == 3:
        key = sys.argv[2]
        hub = Hub(key)
        if hub.claim():
            hub.serve()
        os._exit(0)
    launch()


if __name__ == "__main__":
    main()
