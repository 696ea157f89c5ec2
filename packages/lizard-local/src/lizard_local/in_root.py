"""Open paths inside a root directory, as a process whose ``/`` is that directory would.

The server reaches a namespace sandbox's files through a descriptor of the sandbox's root. Every
symbolic link and ``..`` on the way must then be resolved *inside* that root: an absolute link
target means the sandbox's ``/``, ``..`` stops at it, and no step may lead to the host's files,
not even when a process in the sandbox swaps a directory for a link while the server works.

:func:`open_in` uses ``openat2(RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS)`` (Linux 5.6+), which
gives exactly that in the kernel. Where the system call is missing it resolves the path one
component at a time itself: the same answer, but a link swapped in between two steps could
still redirect it. :func:`open_parent` returns the directory holding a path's last component,
so that callers act on that entry itself (``unlinkat``, ``renameat``, ``fstatat``) without
following it.
"""

from __future__ import annotations

import ctypes
import errno
import os

__all__ = ["components", "open_in", "open_parent"]

_SYS_OPENAT2 = 437  # the same number on every architecture
_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_IN_ROOT = 0x10
_MAX_LINKS = 40
_DIR_PATH = os.O_PATH | os.O_DIRECTORY


class _OpenHow(ctypes.Structure):
    _fields_ = [
        ("flags", ctypes.c_uint64),
        ("mode", ctypes.c_uint64),
        ("resolve", ctypes.c_uint64),
    ]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_have_openat2 = True


def components(path: str) -> list[str]:
    """The names along ``path`` (``""`` and ``.`` dropped; ``..`` kept: it is resolved later)."""
    return [p for p in path.split("/") if p not in ("", ".")]


def _openat2(root_fd: int, rel: str, flags: int, mode: int) -> int:
    how = _OpenHow(flags, mode, _RESOLVE_IN_ROOT | _RESOLVE_NO_MAGICLINKS)
    for _ in range(8):
        fd = _libc.syscall(
            ctypes.c_long(_SYS_OPENAT2),
            ctypes.c_int(root_fd),
            rel.encode("utf-8", "surrogateescape"),
            ctypes.byref(how),
            ctypes.c_size_t(ctypes.sizeof(how)),
        )
        if fd >= 0:
            return int(fd)
        err = ctypes.get_errno()
        if err != errno.EAGAIN:  # EAGAIN: a concurrent rename made ".." ambiguous; try again
            break
    raise OSError(err, os.strerror(err))


def _resolve_by_hand(root_fd: int, path: str) -> str:
    """A path under ``/proc/self/fd/<root_fd>`` with every link followed inside the root."""
    root = f"/proc/self/fd/{root_fd}"
    pending = components(path)
    done: list[str] = []
    hops = 0
    while pending:
        name = pending.pop(0)
        if name == "..":
            if done:
                done.pop()
            continue
        here = root + "/" + "/".join([*done, name])
        if os.path.islink(here):
            hops += 1
            if hops > _MAX_LINKS:
                raise OSError(errno.ELOOP, os.strerror(errno.ELOOP))
            target = os.readlink(here)
            if target.startswith("/"):
                done = []
            pending = components(target) + pending
            continue
        done.append(name)
    return root + "/" + "/".join(done)


def open_in(root_fd: int, path: str, flags: int, mode: int = 0) -> int:
    """Open ``path`` (absolute, as seen from the root ``root_fd``) with ``flags``; OSError."""
    global _have_openat2
    flags |= os.O_CLOEXEC
    creating = bool(flags & os.O_CREAT)
    rel = "/".join(components(path)) or "."
    if _have_openat2:
        try:
            return _openat2(root_fd, rel, flags, mode if creating else 0)
        except OSError as exc:
            if exc.errno not in (errno.ENOSYS, errno.EPERM):  # EPERM: some seccomp filters
                exc.filename = path
                raise
            if exc.errno == errno.EPERM and _openat2_works(root_fd):
                exc.filename = path
                raise
            _have_openat2 = False
    try:
        return os.open(_resolve_by_hand(root_fd, path), flags, mode)
    except OSError as exc:
        exc.filename = path
        raise


def _openat2_works(root_fd: int) -> bool:
    """Whether openat2 itself is allowed (an EPERM can also be a real permission error)."""
    try:
        os.close(_openat2(root_fd, ".", _DIR_PATH | os.O_CLOEXEC, 0))
    except OSError:
        return False
    return True


def open_parent(root_fd: int, path: str) -> tuple[int, str]:
    """An ``O_PATH`` descriptor of the directory holding ``path``'s last entry, and its name.

    The last component must be a name (not ``/``, ``.`` or ``..``): ValueError otherwise. The
    caller closes the descriptor.
    """
    names = components(path)
    if not names or names[-1] == "..":
        raise ValueError(path)
    return open_in(root_fd, "/".join(names[:-1]), _DIR_PATH), names[-1]
