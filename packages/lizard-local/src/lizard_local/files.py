"""File operations on a sandbox's filesystem (E16–E21).

Paths are absolute paths as the sandbox sees them. In namespace mode they are reached through
``/proc/<agent>/root`` with symbolic links resolved inside the sandbox's root (an absolute link
target means the sandbox's ``/``, never the host's). In host mode they are host paths.

Semantics: write creates parent directories, overwrites and stores the bytes exactly (mode 0644
for a new file, owned by ``user`` when given); read returns the raw bytes (404 missing, 400 for a
directory); delete removes a file, link or whole directory (404 missing); list is one level,
sorted by name; stat does not follow a final symlink; move creates the destination's parents.
"""

from __future__ import annotations

import errno
import grp
import os
import pwd
import shutil
import stat as stat_mod
from datetime import UTC, datetime
from typing import Any

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
    "resolve",
    "stat_path",
    "write_file",
]

_MAX_LINKS = 40
_NAMES = {0: "root", 1000: "user"}


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
    for part in path.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if parts:
                parts.pop()
            continue
        parts.append(part)
    return "/" + "/".join(parts)


def resolve(sb: Sandbox, path: str, *, follow_last: bool = True) -> str:
    """The host path for sandbox ``path``, following links inside the sandbox's root."""
    root = sb.fs_root()
    if not root:
        return _normalize(path)
    pending = [p for p in path.split("/") if p not in ("", ".")]
    done: list[str] = []
    hops = 0
    while pending:
        name = pending.pop(0)
        if name == "..":
            if done:
                done.pop()
            continue
        host = root + "/" + "/".join([*done, name])
        if (pending or follow_last) and os.path.islink(host):
            hops += 1
            if hops > _MAX_LINKS:
                raise OSError(errno.ELOOP, "Too many levels of symbolic links", path)
            target = os.readlink(host)
            if target.startswith("/"):
                done = []
            pending = [p for p in target.split("/") if p not in ("", ".")] + pending
            continue
        done.append(name)
    return root + "/" + "/".join(done)


def os_error(exc: OSError, path: str) -> ApiError:
    """Map an OSError to the API's status codes."""
    if exc.errno == errno.ENOENT:
        return ApiError(404, f"No such file or directory: {path}", "FILE_NOT_FOUND")
    if exc.errno == errno.EISDIR:
        return ApiError(400, f"Is a directory: {path}", "IS_A_DIRECTORY")
    if exc.errno == errno.ENOTDIR:
        return ApiError(400, f"Not a directory: {path}", "NOT_A_DIRECTORY")
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return ApiError(400, f"Permission denied: {path}", "PERMISSION_DENIED")
    return ApiError(400, f"{exc.strerror or exc}: {path}", "FILE_ERROR")


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


def file_info(name: str, path: str, host: str) -> dict[str, Any]:
    """The FileInfo object for one entry (lstat: a link is a ``symlink``)."""
    st = os.lstat(host)
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
        info["symlinkTarget"] = os.readlink(host)
    return info


def _chown(host: str, account: UserAccount | None) -> None:
    if account is not None and os.geteuid() == 0:
        os.chown(host, account.uid, account.gid, follow_symlinks=False)


def _makedirs(sb: Sandbox, path: str, account: UserAccount | None) -> None:
    """Create sandbox directory ``path`` and its missing parents, owned by ``account``."""
    missing: list[str] = []
    current = path
    while current != "/":
        host = resolve(sb, current)
        if os.path.isdir(host):
            break
        if os.path.lexists(host):
            raise ApiError(400, f"Not a directory: {current}", "NOT_A_DIRECTORY")
        missing.append(current)
        current = os.path.dirname(current)
    for p in reversed(missing):
        host = resolve(sb, p)
        os.mkdir(host, 0o755)
        _chown(host, account)


def write_file(sb: Sandbox, path: str, data: bytes, account: UserAccount | None) -> None:
    """Create or overwrite ``path`` with ``data``."""
    try:
        _makedirs(sb, os.path.dirname(_normalize(path)), account)
        host = resolve(sb, path)
        if os.path.isdir(host):
            raise ApiError(400, f"Is a directory: {path}", "IS_A_DIRECTORY")
        # Write, then cut to length: truncating to zero first makes ext4 flush the file to disk
        # on close (its replace-via-truncate heuristic), which costs a millisecond per write.
        fd = os.open(host, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if stat_mod.S_ISREG(os.fstat(fd).st_mode):
                os.ftruncate(fd, len(data))
            if account is not None and os.geteuid() == 0:
                os.fchown(fd, account.uid, account.gid)
        finally:
            os.close(fd)
    except OSError as exc:
        raise os_error(exc, path) from exc


def read_file(sb: Sandbox, path: str) -> bytes:
    """The bytes of ``path``."""
    try:
        host = resolve(sb, path)
        if os.path.isdir(host):
            raise ApiError(400, f"Is a directory: {path}", "IS_A_DIRECTORY")
        with open(host, "rb") as f:
            return f.read()
    except OSError as exc:
        raise os_error(exc, path) from exc


def delete_path(sb: Sandbox, path: str) -> None:
    """Remove a file, link or directory tree."""
    if _normalize(path) == "/":
        raise ApiError(400, "Refusing to delete /", "INVALID_PATH")
    try:
        host = resolve(sb, path, follow_last=False)
        st = os.lstat(host)
        if stat_mod.S_ISDIR(st.st_mode):
            shutil.rmtree(host)
        else:
            os.unlink(host)
    except OSError as exc:
        raise os_error(exc, path) from exc


def list_dir(sb: Sandbox, path: str) -> list[dict[str, Any]]:
    """FileInfo of each entry of directory ``path`` (one level)."""
    try:
        host = resolve(sb, path)
        if not os.path.isdir(host):
            if os.path.lexists(host):
                raise ApiError(400, f"Not a directory: {path}", "NOT_A_DIRECTORY")
            raise ApiError(404, f"No such file or directory: {path}", "FILE_NOT_FOUND")
        base = _normalize(path).rstrip("/")
        out = []
        for name in sorted(os.listdir(host)):
            try:
                out.append(file_info(name, f"{base}/{name}", os.path.join(host, name)))
            except FileNotFoundError:
                continue  # removed while listing
        return out
    except OSError as exc:
        raise os_error(exc, path) from exc


def stat_path(sb: Sandbox, path: str) -> dict[str, Any]:
    """FileInfo of ``path`` itself."""
    norm = _normalize(path)
    try:
        host = resolve(sb, path, follow_last=False)
        return file_info(os.path.basename(norm) or "/", norm, host)
    except OSError as exc:
        raise os_error(exc, path) from exc


def move_path(sb: Sandbox, src: str, dst: str, account: UserAccount | None) -> None:
    """Rename ``src`` to ``dst``, creating the destination's parents."""
    try:
        host_src = resolve(sb, src, follow_last=False)
        if not os.path.lexists(host_src):
            raise ApiError(404, f"No such file or directory: {src}", "FILE_NOT_FOUND")
        _makedirs(sb, os.path.dirname(_normalize(dst)), account)
        host_dst = resolve(sb, dst, follow_last=False)
        try:
            os.replace(host_src, host_dst)
        except OSError as exc:
            if exc.errno != errno.EXDEV:
                raise
            shutil.move(host_src, host_dst)  # across private mounts (e.g. /tmp -> /workspace)
    except OSError as exc:
        raise os_error(exc, dst) from exc
