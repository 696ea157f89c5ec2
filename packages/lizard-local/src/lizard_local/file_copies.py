"""Copies of a sandbox's writable files: what pause keeps, snapshots save and forks start from.

A sandbox's files are host directories (:mod:`lizard_local.sandboxes`): in namespace mode its
whole root on disk (``rootfs``: ``/tmp``, ``/root``, ``/home/user``, ``/workspace``, ``/var``,
``/opt``...; the system directories bound into it are mounts of the sandbox's own namespace and
show on the host as empty directories), in host mode its four private directories. Copies keep
modes, owners, times and symbolic links (never followed), make FIFOs anew and leave out sockets
and device nodes, which a fresh boot makes again. A file that vanishes while a running sandbox
is copied is left out, as a crash-consistent copy of a disk would.

What is not copied: ``/etc``'s changes (copy-on-write in a tmpfs of the sandbox's namespace),
``/run`` and ``/dev/shm`` (tmpfs, empty after any boot), and a volume at ``/workspace`` (a
volume is not part of its sandbox).
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

__all__ = ["copy_files", "writable_dirs"]

_HOST_MODE_DIRS = ("tmp", "root", "home-user", "workspace")


def writable_dirs(namespace: bool) -> tuple[str, ...]:
    """The names, under a sandbox's state directory, of the directories that hold its files."""
    return ("rootfs",) if namespace else _HOST_MODE_DIRS


def copy_files(source_base: Path, target_base: Path, namespace: bool) -> None:
    """Copy the sandbox files under ``source_base`` into ``target_base`` (merging directories)."""
    for name in writable_dirs(namespace):
        src = source_base / name
        if src.is_dir():
            _copy_tree(str(src), str(target_base / name))


def _copy_tree(src: str, dst: str) -> None:
    st = os.lstat(src)
    with contextlib.suppress(FileExistsError):
        os.mkdir(dst, 0o700)
    try:
        entries = list(os.scandir(src))
    except FileNotFoundError:
        entries = []
    for entry in entries:
        target = os.path.join(dst, entry.name)
        try:
            _copy_entry(entry, target)
        except FileNotFoundError:
            continue  # removed while we copied
    _copy_meta(dst, st)


def _copy_entry(entry: os.DirEntry[str], target: str) -> None:
    st = entry.stat(follow_symlinks=False)
    mode = st.st_mode
    if stat.S_ISDIR(mode):
        _copy_tree(entry.path, target)
        return
    if os.path.lexists(target):
        if os.path.isdir(target) and not os.path.islink(target):
            return
        os.unlink(target)
    if stat.S_ISLNK(mode):
        os.symlink(os.readlink(entry.path), target)
        with contextlib.suppress(OSError):
            os.lchown(target, st.st_uid, st.st_gid)
        return
    if stat.S_ISFIFO(mode):
        os.mkfifo(target, 0o600)
    elif stat.S_ISREG(mode):
        # O_NOFOLLOW: the entry was a regular file when listed; never follow a swapped-in link.
        fd = os.open(entry.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
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
