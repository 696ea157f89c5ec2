"""File operations on a sandbox's filesystem (``/api/sandboxes/{id}/files...``).

Paths are absolute paths as the sandbox sees them, resolved from a descriptor of the sandbox's
root (:meth:`~lizard_local.sandboxes.Sandbox.open_root`) with :mod:`lizard_local.in_root`: in
namespace mode every symbolic link and ``..`` stays inside the sandbox (an absolute link target
means the sandbox's ``/``, never the host's), even while the sandbox changes the tree. Entries are
then acted on through the descriptor of their directory (``unlinkat``, ``renameat``...), never
by a path the sandbox could redirect. In namespace mode only the sandbox's private directories
are writable; a change anywhere else is a 400 ``READ_ONLY``.

In host mode paths are the host's own. Delete and move (source and destination) then refuse, with
a 400 ``OUTSIDE_SANDBOX``, anything that is not strictly inside one of the sandbox's own
directories (its ``HOME``, ``TMPDIR``...): an absolute path such as ``/tmp/x`` is the host's.
Writes and reads are not restricted there (nor are commands): host mode protects nothing.

Semantics: write creates parent directories, overwrites and stores the bytes exactly (mode 0644
for a new file, owned by ``user`` when given); read returns the raw bytes (404 missing, 400 for a
directory or anything but a regular file); delete removes a file, link or whole directory (404
missing, 400 for ``/`` or a path ending in ``..``); list is one level, sorted by name; stat does
not follow a final symlink; move creates the destination's parents and works across mounts.
"""

from __future__ import annotations

import contextlib
import errno
import grp
import os
import pwd
import secrets
import shutil
import stat as stat_mod
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from lizard_local import in_root
from lizard_local.http import ApiError
from lizard_local.isolation import UserAccount
from lizard_local.sandboxes import Sandbox

__all__ = [
    "delete_path",
    "file_info",
    "list_dir",
    "move_path",
    "read_file",
    "require_abs",
    "stat_path",
    "write_file",
]

_NAMES = {0: "root", 1000: "user"}
_DIR_PATH = os.O_PATH | os.O_DIRECTORY


def require_abs(path: Any, name: str = "path") -> str:
    """The path if it is an absolute string, else 400."""
    if not isinstance(path, str) or not path:
        raise ApiError(400, f"{name} is required", "INVALID_PATH")
    if not path.startswith("/"):
        raise ApiError(400, f"{name} must be an absolute path: {path!r}", "INVALID_PATH")
    if "\0" in path:
        raise ApiError(400, f"{name} must not contain NUL bytes", "INVALID_PATH")
    return path


def _normalize(path: str) -> str:
    parts: list[str] = []
    for part in in_root.components(path):
        if part == "..":
            if parts:
                parts.pop()
            continue
        parts.append(part)
    return "/" + "/".join(parts)


def os_error(exc: OSError, path: str) -> ApiError:
    """Map an OSError to the API's status codes."""
    if exc.errno == errno.ENOENT:
        return ApiError(404, f"No such file or directory: {path}", "FILE_NOT_FOUND")
    if exc.errno == errno.EISDIR:
        return ApiError(400, f"Is a directory: {path}", "IS_A_DIRECTORY")
    if exc.errno == errno.ENOTDIR:
        return ApiError(400, f"Not a directory: {path}", "NOT_A_DIRECTORY")
    if exc.errno == errno.ENXIO:  # opening a FIFO without a reader, or a socket
        return ApiError(400, f"Not a regular file: {path}", "NOT_A_FILE")
    if exc.errno == errno.EROFS:
        return ApiError(400, f"Read-only file system: {path}", "READ_ONLY")
    if exc.errno in (errno.EACCES, errno.EPERM):
        return ApiError(400, f"Permission denied: {path}", "PERMISSION_DENIED")
    return ApiError(400, f"{exc.strerror or exc}: {path}", "FILE_ERROR")


@contextlib.contextmanager
def _os_errors(path: str) -> Iterator[None]:
    """Raise an OSError of the block as the API's error for ``path`` (:func:`os_error`)."""
    try:
        yield
    except OSError as exc:
        raise os_error(exc, path) from exc


@contextlib.contextmanager
def _closing(fd: int) -> Iterator[int]:
    """``fd`` for the block, closed after it."""
    try:
        yield fd
    finally:
        os.close(fd)


@contextlib.contextmanager
def _in_sandbox(sb: Sandbox, path: str) -> Iterator[int]:
    """The sandbox's root descriptor for the block; an OSError of the block is ``path``'s error.

    The root is opened before the mapping applies: its own failures (404 when the sandbox is
    gone) are not ``path``'s. It is closed whatever happens.
    """
    root = sb.open_root()
    with _closing(root), _os_errors(path):
        yield root


def _owner(uid: int) -> str:
    if uid in _NAMES:
        return _NAMES[uid]
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _group(gid: int) -> str:
    if gid in _NAMES:
        return _NAMES[gid]
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def file_info(name: str, path: str, dir_fd: int, entry: str) -> dict[str, Any]:
    """The FileInfo object for ``entry`` of directory ``dir_fd`` (lstat: a link is a ``symlink``).

    ``name`` and ``path`` are what the answer shows; ``entry`` ``"."`` is the directory itself.
    """
    st = os.lstat(entry, dir_fd=dir_fd)
    if stat_mod.S_ISLNK(st.st_mode):
        kind = "symlink"
    elif stat_mod.S_ISDIR(st.st_mode):
        kind = "dir"
    else:
        kind = "file"
    mod_ms = int(st.st_mtime * 1000)
    info: dict[str, Any] = {
        "name": name,
        "path": path,
        "type": kind,
        "size": st.st_size,
        "mode": stat_mod.S_IMODE(st.st_mode),
        "modTime": mod_ms,
        "modifiedAt": datetime.fromtimestamp(st.st_mtime, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        "permissions": stat_mod.filemode(st.st_mode),
        "owner": _owner(st.st_uid),
        "group": _group(st.st_gid),
    }
    if kind == "symlink":
        info["symlinkTarget"] = os.readlink(entry, dir_fd=dir_fd)
    return info


def _last_entry(path: str, name: str = "path") -> None:
    """400 unless ``path`` names an entry that can be deleted or moved."""
    names = in_root.components(path)
    if not names:
        raise ApiError(400, f"Refusing to change /: {name} {path!r}", "INVALID_PATH")
    if names[-1] == "..":
        raise ApiError(400, f"{name} must not end in '..': {path!r}", "INVALID_PATH")


def _require_own(sb: Sandbox, dir_fd: int, entry: str, path: str) -> None:
    """Host mode: 400 unless ``entry`` of ``dir_fd`` is strictly inside the sandbox's own dirs."""
    if sb.namespace:
        return
    where = os.readlink(f"/proc/self/fd/{dir_fd}")  # the directory's real path, now
    _require_own_path(sb, os.path.join(where, entry), path)


def _require_own_path(sb: Sandbox, real: str, path: str) -> None:
    if not any(real.startswith(d + "/") for d in sb.own_dirs()):
        raise ApiError(
            400,
            f"Refusing to change {path}: in host isolation mode only paths inside the sandbox's "
            "own directories (its HOME, TMPDIR and working directory) can be deleted or moved",
            "OUTSIDE_SANDBOX",
        )


def _chown(name: str, dir_fd: int, account: UserAccount | None) -> None:
    if account is not None and os.geteuid() == 0:
        os.chown(name, account.uid, account.gid, dir_fd=dir_fd, follow_symlinks=False)


def _makedirs(root: int, path: str, account: UserAccount | None) -> None:
    """Create directory ``path`` (lexically normalized) and its missing parents."""
    try:
        os.close(in_root.open_in(root, path, _DIR_PATH))
        return  # the common case: it is there
    except FileNotFoundError:
        pass
    except NotADirectoryError as exc:
        raise ApiError(400, f"Not a directory: {path}", "NOT_A_DIRECTORY") from exc
    names = in_root.components(path)
    for i in range(1, len(names) + 1):
        here = "/" + "/".join(names[:i])
        try:
            os.close(in_root.open_in(root, here, _DIR_PATH))
            continue
        except FileNotFoundError:
            pass
        except NotADirectoryError as exc:
            raise ApiError(400, f"Not a directory: {here}", "NOT_A_DIRECTORY") from exc
        with _closing(in_root.open_in(root, "/".join(names[: i - 1]), _DIR_PATH)) as parent:
            try:
                os.mkdir(names[i - 1], 0o755, dir_fd=parent)
                _chown(names[i - 1], parent, account)
            except FileExistsError as exc:
                # Made by someone else meanwhile (fine), or a dangling link (not a directory).
                try:
                    os.close(in_root.open_in(root, here, _DIR_PATH))
                except OSError:
                    raise ApiError(400, f"Not a directory: {here}", "NOT_A_DIRECTORY") from exc


def write_file(sb: Sandbox, path: str, data: bytes, account: UserAccount | None) -> None:
    """Create or overwrite ``path`` with ``data``."""
    with _in_sandbox(sb, path) as root:
        _makedirs(root, os.path.dirname(_normalize(path)), account)
        # O_NONBLOCK: a FIFO with no reader must not hang the server; only regular files pass.
        flags = os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK
        with _closing(in_root.open_in(root, path, flags, 0o644)) as fd:
            if not stat_mod.S_ISREG(os.fstat(fd).st_mode):
                raise ApiError(400, f"Not a regular file: {path}", "NOT_A_FILE")
            # Write, then cut to length: truncating to zero first makes ext4 flush the file to
            # disk on close (its replace-via-truncate heuristic): a millisecond per write.
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.ftruncate(fd, len(data))
            if account is not None and os.geteuid() == 0:
                os.fchown(fd, account.uid, account.gid)


def read_file(sb: Sandbox, path: str) -> bytes:
    """The bytes of ``path``."""
    with (
        _in_sandbox(sb, path) as root,
        _closing(in_root.open_in(root, path, os.O_RDONLY | os.O_NONBLOCK)) as fd,
    ):
        mode = os.fstat(fd).st_mode
        if stat_mod.S_ISDIR(mode):
            raise ApiError(400, f"Is a directory: {path}", "IS_A_DIRECTORY")
        if not stat_mod.S_ISREG(mode):
            raise ApiError(400, f"Not a regular file: {path}", "NOT_A_FILE")
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)


def _remove_entry(dir_fd: int, name: str) -> None:
    """Remove a file, link (itself) or directory tree (no link inside it is followed)."""
    if stat_mod.S_ISDIR(os.lstat(name, dir_fd=dir_fd).st_mode):
        shutil.rmtree(name, dir_fd=dir_fd)
    else:
        os.unlink(name, dir_fd=dir_fd)


def delete_path(sb: Sandbox, path: str) -> None:
    """Remove a file, link or directory tree."""
    _last_entry(path)
    with _in_sandbox(sb, path) as root:
        parent, name = in_root.open_parent(root, path)
        with _closing(parent):
            _require_own(sb, parent, name, path)
            _remove_entry(parent, name)


def list_dir(sb: Sandbox, path: str) -> list[dict[str, Any]]:
    """FileInfo of each entry of directory ``path`` (one level)."""
    with (
        _in_sandbox(sb, path) as root,
        _closing(in_root.open_in(root, path, os.O_RDONLY | os.O_DIRECTORY)) as fd,
    ):
        base = _normalize(path).rstrip("/")
        out = []
        for name in sorted(os.listdir(fd)):
            try:
                out.append(file_info(name, f"{base}/{name}", fd, name))
            except FileNotFoundError:
                continue  # removed while listing
        return out


def stat_path(sb: Sandbox, path: str) -> dict[str, Any]:
    """FileInfo of ``path`` itself."""
    norm = _normalize(path)
    shown = os.path.basename(norm) or "/"
    names = in_root.components(path)
    with _in_sandbox(sb, path) as root:
        if not names:
            return file_info(shown, norm, root, ".")
        if names[-1] == "..":  # a directory, never a link: following it changes nothing
            fd = in_root.open_in(root, path, _DIR_PATH)
            entry = "."
        else:
            fd, entry = in_root.open_parent(root, path)
        with _closing(fd):
            return file_info(shown, norm, fd, entry)


def move_path(sb: Sandbox, src: str, dst: str, account: UserAccount | None) -> None:
    """Rename ``src`` to ``dst``, creating the destination's parents."""
    _last_entry(src, "from")
    _last_entry(dst, "to")
    # An OSError is reported against the destination, but while the source is looked up.
    with _in_sandbox(sb, dst) as root:
        with _os_errors(src):
            src_dir, src_name = in_root.open_parent(root, src)
        with _closing(src_dir):
            with _os_errors(src):
                os.lstat(src_name, dir_fd=src_dir)
            _require_own(sb, src_dir, src_name, src)
            if not sb.namespace:  # checked before its parents are made, and again after
                _require_own_path(sb, os.path.realpath(_normalize(dst)), dst)
            _makedirs(root, os.path.dirname(_normalize(dst)), account)
            dst_dir, dst_name = in_root.open_parent(root, dst)
            with _closing(dst_dir):
                _require_own(sb, dst_dir, dst_name, dst)
                try:
                    os.rename(src_name, dst_name, src_dir_fd=src_dir, dst_dir_fd=dst_dir)
                except OSError as exc:
                    if exc.errno != errno.EXDEV:
                        raise
                    _move_across(src_dir, src_name, dst_dir, dst_name)


def _move_across(src_dir: int, src_name: str, dst_dir: int, dst_name: str) -> None:
    """Move between file systems (e.g. ``/tmp`` -> ``/workspace``): copy, rename, remove.

    The copy lands under a temporary name beside the destination and is renamed over it, so
    the outcome (replace a file, refuse a non-empty directory...) is that of ``rename``.
    """
    temporary = f".lizard-move-{secrets.token_hex(8)}"
    try:
        _copy_entry(src_dir, src_name, dst_dir, temporary)
        os.rename(temporary, dst_name, src_dir_fd=dst_dir, dst_dir_fd=dst_dir)
    except BaseException:
        with contextlib.suppress(OSError):
            _remove_entry(dst_dir, temporary)
        raise
    _remove_entry(src_dir, src_name)


def _copy_entry(src_dir: int, src_name: str, dst_dir: int, dst_name: str) -> None:
    """Copy one entry (recursively) between directories given by descriptor; links as links.

    Every step goes through a directory descriptor with ``O_NOFOLLOW``/``O_EXCL``, and metadata
    is set through the new entry's own descriptor, so nothing the sandbox changes meanwhile can
    make the copy read or write outside the two trees.
    """
    st = os.lstat(src_name, dir_fd=src_dir)
    mode = st.st_mode
    if stat_mod.S_ISLNK(mode):
        os.symlink(os.readlink(src_name, dir_fd=src_dir), dst_name, dir_fd=dst_dir)
    elif stat_mod.S_ISFIFO(mode):
        os.mkfifo(dst_name, stat_mod.S_IMODE(mode), dir_fd=dst_dir)
    elif stat_mod.S_ISDIR(mode):
        os.mkdir(dst_name, 0o700, dir_fd=dst_dir)
        nofollow = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
        with (
            _closing(os.open(src_name, nofollow, dir_fd=src_dir)) as source,
            _closing(os.open(dst_name, nofollow, dir_fd=dst_dir)) as target,
        ):
            for child in os.listdir(source):
                _copy_entry(source, child, target, child)
            _copy_metadata(target, st)
        return
    elif stat_mod.S_ISREG(mode):
        reading = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        writing = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        with (
            _closing(os.open(src_name, reading, dir_fd=src_dir)) as source,
            _closing(os.open(dst_name, writing, 0o600, dir_fd=dst_dir)) as target,
        ):
            while chunk := os.read(source, 1 << 20):
                view = memoryview(chunk)
                while view:
                    view = view[os.write(target, view) :]
            _copy_metadata(target, st)
        return
    else:
        raise OSError(errno.EINVAL, "cannot move a device or socket to another file system")
    # A link or a FIFO: no descriptor to work through, so never follow the new entry.
    if os.geteuid() == 0:
        os.chown(dst_name, st.st_uid, st.st_gid, dir_fd=dst_dir, follow_symlinks=False)
    os.utime(dst_name, ns=(st.st_atime_ns, st.st_mtime_ns), dir_fd=dst_dir, follow_symlinks=False)


def _copy_metadata(fd: int, st: os.stat_result) -> None:
    """Mode, owner (as root) and times of ``st`` onto the open file ``fd``."""
    if os.geteuid() == 0:
        os.fchown(fd, st.st_uid, st.st_gid)
    os.fchmod(fd, stat_mod.S_IMODE(st.st_mode))  # after chown, which may clear set-id bits
    os.utime(fd, ns=(st.st_atime_ns, st.st_mtime_ns))
