"""Copies of a sandbox's writable files: what pause keeps, snapshots save and forks start from.

A sandbox's files are host directories (:mod:`lizard_local.sandboxes`): in namespace mode its
whole root on disk (``rootfs``: ``/tmp``, ``/root``, ``/home/user``, ``/workspace``, ``/var``,
``/opt``...; the system directories bound into it are mounts of the sandbox's own namespace and
show on the host as empty directories), in host mode its four private directories. Copies keep
modes, owners, times and symbolic links (never followed), make FIFOs anew and leave out sockets
and device nodes, which a fresh boot makes again. A file that vanishes while a running sandbox
is copied is left out, as a crash-consistent copy of a disk would.

The sandbox's own processes may change its files while they are copied, so nothing is read by
path: each directory is opened relative to its parent's descriptor with ``O_NOFOLLOW``, each
file likewise (``O_NONBLOCK`` too, and kept only if it is still a regular file), so a
directory swapped for a link to a host path mid-copy is never followed out of the root.
Directories nest at most :data:`MAX_DEPTH` deep (one open descriptor each); deeper is a 409.

What is not copied: ``/etc``'s changes (copy-on-write in a tmpfs of the sandbox's namespace),
``/run`` and ``/dev/shm`` (tmpfs, empty after any boot), and a volume at ``/workspace`` (a
volume is not part of its sandbox).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path
from typing import Final

from lizard_local.http import ApiError

__all__ = ["MAX_DEPTH", "copy_files", "writable_dirs"]

MAX_DEPTH: Final = 200
"""How deep the copied directories may nest."""

_HOST_MODE_DIRS = ("tmp", "root", "home-user", "workspace")
_DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS: Final = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
# What an open of a name swapped meanwhile (for a link, a file, nothing) fails with.
_SWAPPED: Final = frozenset({errno.ELOOP, errno.ENOTDIR, errno.ENOENT, errno.ENXIO})


def writable_dirs(namespace: bool) -> tuple[str, ...]:
    """The names, under a sandbox's state directory, of the directories that hold its files."""
    return ("rootfs",) if namespace else _HOST_MODE_DIRS


def copy_files(source_base: Path, target_base: Path, namespace: bool) -> None:
    """Copy the sandbox files under ``source_base`` into ``target_base`` (merging directories)."""
    for name in writable_dirs(namespace):
        fd = _open(str(source_base / name), _DIR_FLAGS, None)
        if fd is None:
            continue
        try:
            _copy_dir(fd, str(target_base / name), 0)
        finally:
            os.close(fd)


def _open(name: str, flags: int, dir_fd: int | None) -> int | None:
    """The descriptor, or None when the name is no longer what the flags allow."""
    try:
        return os.open(name, flags, dir_fd=dir_fd)
    except OSError as error:
        if error.errno in _SWAPPED:
            return None
        raise


def _copy_dir(fd: int, dst: str, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise ApiError(
            409,
            f"The sandbox's files nest more than {MAX_DEPTH} directories deep; they cannot be "
            "copied.",
            "FILES_TOO_DEEP",
        )
    st = os.fstat(fd)
    with contextlib.suppress(FileExistsError):
        os.mkdir(dst, 0o700)
    with os.scandir(fd) as listing:
        names = [entry.name for entry in listing]
    for name in names:
        with contextlib.suppress(FileNotFoundError):  # removed while we copied
            _copy_entry(fd, name, os.path.join(dst, name), depth)
    _copy_meta(dst, st)


def _copy_entry(parent: int, name: str, target: str, depth: int) -> None:
    st = os.stat(name, dir_fd=parent, follow_symlinks=False)
    mode = st.st_mode
    if stat.S_ISDIR(mode):
        fd = _open(name, _DIR_FLAGS, parent)
        if fd is not None:
            try:
                _copy_dir(fd, target, depth + 1)
            finally:
                os.close(fd)
        return
    if os.path.lexists(target):
        if os.path.isdir(target) and not os.path.islink(target):
            return
        os.unlink(target)
    if stat.S_ISLNK(mode):
        os.symlink(os.readlink(name, dir_fd=parent), target)
        with contextlib.suppress(OSError):
            os.lchown(target, st.st_uid, st.st_gid)
        return
    if stat.S_ISFIFO(mode):
        os.mkfifo(target, 0o600)
    elif stat.S_ISREG(mode):
        fd = _open(name, _FILE_FLAGS, parent)
        if fd is None:
            return
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                return  # swapped for a FIFO or a device since it was listed
            with open(fd, "rb", closefd=False) as fin, open(target, "wb") as fout:
                while chunk := fin.read(1 << 20):
                    fout.write(chunk)
        finally:
            os.close(fd)
    else:
        return  # sockets and devices: made again by whatever needs them after a boot
    _copy_meta(target, st)


def _copy_meta(path: str, st: os.stat_result) -> None:
    with contextlib.suppress(OSError):
        os.chown(path, st.st_uid, st.st_gid, follow_symlinks=False)
    os.chmod(path, stat.S_IMODE(st.st_mode))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns), follow_symlinks=False)
