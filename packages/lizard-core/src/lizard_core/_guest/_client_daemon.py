"""Finding, starting and killing the kernel daemon of one key, for the kernel client.

Part of the kernel client program (bundled into it by ``lizard_core._guest.source``).

- The daemon's directory is private (0700, ours, not a symlink) or :class:`Refused`
  (``._client_spawn``, which also starts the daemon's Python).
- Starting and stopping the daemon is serialised between clients by :class:`StartLock`.
- A daemon runs the version the host sent (its source's hash names the file); without that
  source at hand the client asks for it (:class:`NeedSource`).
- Killing the daemon kills its process group and waits until it is gone.
"""

from __future__ import annotations

import _socket
import binascii
import os
import sys
import time
from typing import TYPE_CHECKING

from ._client_spawn import (
    Early,
    Refused,
    daemon_file,
    start_python,
    start_time,
)
from ._wait_status import returncode

if TYPE_CHECKING:  # annotations only: the compact program drops this block and every annotation
    from typing import Optional

    from ._prelude import Frame


SIGINT = 2
SIGKILL = 9
"""Signal numbers (the same on every Linux architecture): ``signal`` would import ``enum``."""


def alive(pid: int) -> bool:
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            return f.read().rsplit(b")", 1)[-1].split()[0] != b"Z"
    except OSError:
        return False


def kill_daemon(pid: int) -> None:
    """SIGKILL the daemon's process group (or the daemon alone) and wait until it is gone."""
    try:
        group = os.getpgid(pid)
    except OSError:
        return
    try:
        if group == pid:
            os.killpg(pid, SIGKILL)
        else:
            os.kill(pid, SIGKILL)
    except OSError:
        pass
    end = time.monotonic() + 5
    while alive(pid) and time.monotonic() < end:
        try:
            os.waitpid(pid, os.WNOHANG)  # reaps it when we started it
        except ChildProcessError:
            pass
        time.sleep(0.002)


def connect(directory: str) -> _socket.socket:
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    path = os.path.join(directory, "sock")
    dir_fd = None
    if len(path.encode()) > 100:
        # A Unix socket address holds 108 bytes; a deep TMPDIR (lizard-local's host mode)
        # needs more. The directory's descriptor gives the same file a short name.
        dir_fd = os.open(directory, os.O_RDONLY)
        path = "/proc/self/fd/%d/sock" % dir_fd
    try:
        sock.connect(path)
    except OSError:
        sock.close()
        raise
    finally:
        if dir_fd is not None:
            os.close(dir_fd)
    return sock


def log_tail(directory: str, kernel: Optional[str] = None, size: int = 2000) -> str:
    """The end of the daemon log; with ``kernel``, only what that daemon wrote (a fault dump)."""
    try:
        with open(os.path.join(directory, "daemon.log"), "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 262144))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    if kernel:
        marker = "kernel %s " % kernel
        at = text.rfind(marker)
        if at < 0:
            return ""
        text = text[at:].split("\n", 1)[1] if "\n" in text[at:] else ""
    return text[-size:]


class StartLock:
    """Serialises starting and stopping the daemon between concurrent clients."""

    def __init__(self, directory: str) -> None:
        self.fd = os.open(os.path.join(directory, "lock"), os.O_RDWR | os.O_CREAT, 0o600)

    def __enter__(self) -> StartLock:
        import fcntl

        fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.fd >= 0:
            os.close(self.fd)  # releases the lock
            self.fd = -1


def daemon_name(req: Frame) -> str:
    return daemon_file(str(req.get("daemon_sha") or ""))


def daemon_path(directory: str, req: Frame) -> Optional[str]:
    """The daemon's source in the kernel directory, written from the request when missing."""
    path = os.path.join(directory, daemon_name(req))
    if not os.path.exists(path):
        source = req.get("daemon")
        if not source:
            return None
        import zlib

        data = zlib.decompress(binascii.a2b_base64(source))
        tmp = path + ".%d" % os.getpid()
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
        os.rename(tmp, path)
    return path


def runs_version(pid: int, req: Frame) -> bool:
    """True when the daemon ``pid`` runs the daemon version this request was written for."""
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        return True  # no /proc: nothing to compare, trust it
    # ``python3 -c LOADER <file> ...``; ``python3 <file> ...`` as clients before it started it.
    name = daemon_name(req).encode()
    return any(len(argv) > i and argv[i].endswith(name) for i in (1, 3))


class NeedSource(Exception):
    pass


def start_daemon(directory: str, req: Frame) -> _socket.socket:
    """Start a daemon (the lock is held) and return a connection to it once it listens."""
    return spawn_daemon(directory, req).connection(req)


def spawn_daemon(
    directory: str, req: Frame, lock: Optional[StartLock] = None, early: Optional[Early] = None
) -> Starting:
    """Start a daemon (the lock is held) and return at once: :meth:`Starting.connection` waits.

    ``lock``, when given, is released once the daemon listens or failed to start. ``early``: a
    daemon's Python this call started ahead (:func:`~._client_spawn.start_early`), taken where
    it was started for this daemon, else let go.
    """
    try:
        path = daemon_path(directory, req)
        if path is None:
            raise NeedSource()
        path = os.path.abspath(path)  # the daemon's __file__, and its code's file name
        cwd = req.get("cwd") or ""
        for name in ("sock", "pid", "busy"):
            try:
                os.unlink(os.path.join(directory, name))
            except FileNotFoundError:
                pass
        log_path = os.path.join(directory, "daemon.log")
        try:
            if os.path.getsize(log_path) > 8 * 1024 * 1024:
                os.truncate(log_path, 0)  # an early Python has it open already (O_APPEND)
        except OSError:
            pass
        python = early
        if python is None or not (python.fits(directory, path, cwd) and alive(python.pid)):
            if python is not None:
                python.drop()
            python = start_python(directory, path, cwd)
        try:
            with open(os.path.join(directory, "pid"), "w") as f:
                f.write("%d %s\n" % (python.pid, start_time(python.pid)))
        except BaseException:
            # Unrecorded, it must not become the daemon.
            python.drop()
            kill_daemon(python.pid)
            raise
        send_code(python.code, path)
        python.code = -1
    except BaseException:
        if lock is not None:
            lock.__exit__()
        raise
    return Starting(directory, python.pid, python.ready, lock)


def send_code(fd: int, path: str) -> None:
    """Make the Python of pipe ``fd`` the daemon: ``G``, then the file's code (marshal); close.

    Where this process may use one CPU only, or on any failure, it sends ``G`` alone: the
    daemon then compiles the file itself (:data:`~._client_spawn.LOADER`).
    """
    try:
        os.write(fd, b"G")  # first, so that a client failing from here on still starts it
        if len(getattr(os, "sched_getaffinity", lambda _: ())(0)) < 2:
            return  # one CPU: nothing would run side by side
        import fcntl
        import marshal

        try:
            fcntl.fcntl(fd, 1031, 1 << 18)  # F_SETPIPE_SZ: all of it without waiting
        except OSError:
            pass
        with open(path, "rb") as f:
            data = marshal.dumps(compile(f.read(), path, "exec", dont_inherit=True))
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    except Exception:
        pass
    finally:
        os.close(fd)


def exit_code(pid: int, wait_s: float) -> Optional[int]:
    """Our child ``pid``'s exit code (minus the signal that killed it), or None.

    None when it did not exit within ``wait_s``.
    """
    end = time.monotonic() + wait_s
    while True:
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return None
        if done:
            return returncode(status)
        if time.monotonic() >= end:
            return None
        time.sleep(0.005)


class Starting:
    """A daemon started and not yet listening: :meth:`connection` waits for it."""

    def __init__(
        self, directory: str, pid: int, ready: _socket.socket, lock: Optional[StartLock]
    ) -> None:
        self.directory = directory
        self.pid = pid
        self.ready = ready
        self.lock = lock

    def connection(self, req: Frame) -> _socket.socket:
        """A connection to the daemon once it listens; :class:`Refused` if it cannot start."""
        directory = self.directory
        deadline = time.monotonic() + float(req.get("start_timeout") or 60)
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    kill_daemon(self.pid)
                    raise Refused("the kernel daemon did not start in time: " + log_tail(directory))
                self.ready.settimeout(min(left, 1.0))
                try:
                    said = self.ready.recv(1)
                except _socket.timeout:
                    continue
                if said:
                    return connect(directory)
                # Ended without a word: the daemon exited before it listened.
                code: object = exit_code(self.pid, 5.0)
                if code is None:
                    kill_daemon(self.pid)
                    code = "none, killed"
                raise Refused(
                    "the kernel daemon exited while starting (code %s): %s"
                    % (code, log_tail(directory).strip() or "no output")
                )
        finally:
            self.ready.close()
            if self.lock is not None:
                self.lock.__exit__()


def peer_pid(sock: _socket.socket) -> int:
    # struct ucred {pid_t pid; uid_t uid; gid_t gid;}: three native 32-bit ints, pid first.
    creds = sock.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, 12)
    return int.from_bytes(creds[:4], sys.byteorder, signed=True)
