"""Starting the kernel daemon's Python: the first part of the kernel client program.

Part of the kernel client program (bundled into it by ``lizard_core._guest.source``), in the part
that runs before the rest is compiled (``lizard_core._guest``'s parts): in a new sandbox the
daemon's Python start (site, then the daemon's imports) is the longest stretch of a new kernel,
and :func:`start_early` sets it going while the client compiles the rest of itself, the daemon's
code and ``json``.

- The daemon's directory is private (0700, ours, not a symlink) or :class:`Refused`.
- A Python started early is the daemon only once the client, holding the start lock, records
  its pid and tells it so (``G`` on its code pipe, see :data:`LOADER`); one not taken exits as
  soon as its pipe closes, having run nothing of the daemon's.
"""

from __future__ import annotations

import _socket
import os
import sys
from typing import TYPE_CHECKING

from ._descriptors import close_from

if TYPE_CHECKING:  # annotations only: the compact program drops this block and every annotation
    from typing import List, Optional, Tuple


OPENS = ("execute", "install", "ping")
"""The operations that connect to the daemon, starting it when none runs."""


class Refused(Exception):
    pass


def private_dir(path: str) -> str:
    """Create ``path`` 0700 if missing; refuse it unless it is our own private real directory."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    st = os.lstat(path)
    if not os.path.isdir(path) or os.path.islink(path):
        raise Refused("%s is not a directory" % path)
    if st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise Refused("%s is not private to uid %d" % (path, os.getuid()))
    return path


def kernel_dir(key: str) -> str:
    if not key or "/" in key or key in (".", ".."):
        raise Refused("bad kernel key %r" % (key,))
    root = os.environ.get("TMPDIR") or "/tmp"
    base = private_dir(os.path.join(root, ".lizard-kernel-%d" % os.getuid()))
    return private_dir(os.path.join(base, key))


def read_pid(directory: str) -> int:
    """The pid of this directory's daemon, which the ``pid`` file names and which runs, or 0."""
    try:
        with open(os.path.join(directory, "pid")) as f:
            fields = f.read().split()
        pid = int(fields[0])
    except (OSError, ValueError, IndexError):
        return 0
    return pid if is_daemon(pid, directory, fields[1] if len(fields) > 1 else None) else 0


def is_daemon(pid: int, directory: str, started: Optional[str] = None) -> bool:
    """True when ``pid`` is alive and is this directory's daemon (pids get reused).

    ``started``: its start time as the ``pid`` file records it (``/proc/<pid>/stat``), so that a
    pid taken since (after a restore, pids start again from 1), even by another client's Python
    started for this directory but not yet the daemon, is not it.
    """
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            argv = f.read().split(b"\0")
        with open("/proc/%d/stat" % pid, "rb") as f:
            fields = f.read().rsplit(b")", 1)[-1].split()
    except OSError:
        return False
    if started is not None and fields[19:20] != [started.encode()]:
        return False
    return fields[0] != b"Z" and directory.encode() in argv


def start_time(pid: int) -> str:
    """``pid``'s start time (clock ticks after boot, ``/proc/<pid>/stat``), or "" unknown."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            return f.read().rsplit(b")", 1)[-1].split()[19].decode()
    except (OSError, IndexError):
        return ""


def daemon_file(sha: str) -> str:
    """The name of the daemon's source file for version ``sha``."""
    return "kernel_daemon-%s.py" % "".join(c for c in sha if c.isalnum())[:16]


class Early:
    """A daemon's Python, started: the daemon once ``_client_daemon.spawn_daemon`` takes it."""

    def __init__(
        self, pid: int, ready: _socket.socket, code: int, path: str, directory: str, cwd: str
    ) -> None:
        self.pid = pid
        self.ready = ready
        self.code = code
        self.path = path
        self.directory = directory
        self.cwd = cwd
        self.inode = inode(directory)
        """The directory it has its log in (a ``close`` may remove it and another make it anew)."""

    def fits(self, directory: str, path: str, cwd: str) -> bool:
        """Whether it can still become the daemon of ``path`` in ``directory``, started in ``cwd``.

        Not where it was let go or taken already, or the directory is not the one it logs to.
        Whether it still runs is for the caller to see (``_client_daemon.alive``).
        """
        return (
            self.code >= 0
            and (self.directory, self.path, self.cwd) == (directory, path, cwd)
            and self.inode == inode(directory)
        )

    def drop(self) -> None:
        """Not taken: its pipe closed, it exits (reaped where it already has)."""
        if self.code >= 0:
            os.close(self.code)
            self.code = -1
            self.ready.close()
            try:
                os.waitpid(self.pid, os.WNOHANG)
            except OSError:
                pass


def inode(path: str) -> Tuple[int, int]:
    """The device and inode of ``path`` (a directory removed and made again is another)."""
    st = os.stat(path)
    return st.st_dev, st.st_ino


def start_early(argv: List[str]) -> Optional[Early]:
    """The daemon's Python, started now where this call (``argv``) will start a daemon, else None.

    That is an operation that opens the kernel, where no daemon of this directory runs and the
    daemon's source is at hand, on more than one CPU (on one, nothing would run side by side).
    Any doubt or failure: None, and the daemon starts as it always did, later.
    """
    try:
        parts = int(argv[2])
        op, key, sha, cwd, daemon = (argv[3 + parts :] + [""] * 5)[:5]
        if op not in OPENS or len(getattr(os, "sched_getaffinity", lambda _: ())(0)) < 2:
            return None
        directory = kernel_dir(key)
        if read_pid(directory):
            return None
        path = os.path.abspath(os.path.join(directory, daemon_file(sha)))
        if not daemon and not os.path.exists(path):
            return None  # the client asks for the source first
        return start_python(directory, path, cwd)
    except (Refused, OSError, ValueError, IndexError):
        return None


def start_python(directory: str, path: str, cwd: str) -> Early:
    """Start the daemon's Python (:data:`LOADER`) for ``path`` in ``directory``: it waits."""
    if cwd:
        os.makedirs(cwd, exist_ok=True)
    # Kept under 8 MiB by the client that takes the start lock (``_client_daemon``).
    log = os.open(
        os.path.join(directory, "daemon.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600
    )
    # The daemon writes one byte to ``ready`` once it listens (and the pair reads as ended
    # if it dies first): waiting on it costs no polling delay, which would add up to 20 ms.
    ready, theirs = _socket.socketpair()
    code_in, code_out = os.pipe()
    try:
        keep = (theirs.fileno(), code_in)
        argv = [sys.executable, "-c", LOADER, path, directory, cwd] + [str(fd) for fd in keep]
        pid = spawn(argv, log, keep, cwd)
    except BaseException:
        ready.close()
        os.close(code_out)
        raise
    finally:
        os.close(log)
        theirs.close()
        os.close(code_in)
    return Early(pid, ready, code_out, path, directory, cwd)


LOADER = """\
def load():
    import _signal, marshal, os, sys
    fd = int(sys.argv.pop())
    # Until taken, an interrupt is not for this process (a pid file left from before a restore
    # may name its pid): it keeps what it had, as the daemon.
    interrupt = _signal.getsignal(2)
    _signal.signal(2, _signal.SIG_IGN)
    # As for ``python3 <file>``, and before any import: -c put the working directory (maybe a
    # shared one, where another user may have left a json.py) first.
    if sys.path and sys.path[0] == "":
        sys.path[0] = os.path.dirname(sys.argv[1])
    chunks = []
    os.set_blocking(fd, False)
    # While the client compiles the rest of itself and this program: what the daemon imports,
    # a look at the pipe before each (closed with nothing on it: not taken, so stop).
    for name in ('__future__', '_ast', 'json', 'linecache', 'select', 'threading', 'warnings'):
        if not chunks:
            try:
                chunk = os.read(fd, 1 << 20)
            except BlockingIOError:
                chunk = None
            if chunk == b"":
                os._exit(0)
            if chunk:
                chunks.append(chunk)
        try:
            __import__(name)
        except ImportError:
            pass
    os.set_blocking(fd, True)
    while True:
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(fd)
    data = b"".join(chunks)
    if data[:1] != b"G":
        os._exit(0)  # not taken: another daemon serves, or the client is gone
    _signal.signal(2, interrupt)
    sys.argv = sys.argv[1:]
    path = sys.argv[0]
    sys.modules["__main__"].__file__ = path
    try:
        return marshal.loads(data[1:])
    except Exception:
        with open(path, "rb") as f:
            return compile(f.read(), path, "exec", dont_inherit=True)
code = load()
del load
exec(code)
"""
"""How the daemon's Python starts: ``python3 -c LOADER <file> DIR CWD READY CODE``. It imports
what the daemon imports (its working directory off ``sys.path`` first; it stops where the pipe
``CODE`` closes with nothing on it), then waits for that pipe: ``G`` (this process is the
daemon: its pid is recorded) and the code object the client compiled meanwhile (marshal), after
which it runs the daemon's file as ``python3 <file> DIR CWD READY`` would; ``G`` alone (one CPU,
or the client failed after recording the pid) and it compiles the file itself; nothing (the
pipe closed) and it exits, having run nothing of the daemon's.
"""


def spawn(argv: List[str], log: int, keep: Tuple[int, ...], cwd: str) -> int:
    """Fork and exec ``argv`` in a new session; its pid.

    What ``subprocess.Popen(start_new_session=True, close_fds=True)`` would do: stdin from
    ``/dev/null``, stdout and stderr to ``log``, no descriptor but ``keep`` beyond them, in
    ``cwd``. By hand, since importing ``subprocess`` costs more than this whole start in a new
    sandbox (the kernel client runs there before any hub has it imported). A failure in the
    child (a missing interpreter, an unusable ``cwd``) goes to ``log``, and the child exits
    127, which the caller reads as a daemon that exited while starting.
    """
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        pid = os.fork()
    except BaseException:
        os.close(null)
        raise
    if pid == 0:
        try:
            os.setsid()
            for source, target in ((null, 0), (log, 1), (log, 2)):
                os.dup2(source, target)
            for fd in keep:
                os.set_inheritable(fd, True)
            close_from(3, keep)
            if cwd:
                os.chdir(cwd)
            os.execv(argv[0], argv)
        except BaseException as exc:
            try:
                os.write(2, ("cannot start the kernel daemon: %s\n" % (exc,)).encode())
            except BaseException:
                pass
        os._exit(127)
    os.close(null)
    return pid
