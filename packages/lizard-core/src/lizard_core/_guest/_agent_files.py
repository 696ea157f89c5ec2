"""The agent's file operations: stat, list, read, write, mkdir, remove, exists, realpath.

Part of the agent program (bundled into it by ``lizard_core._guest.source``).

- Paths come from the host and errors leave as ``OSError`` (the agent's ``err`` end frame).
- A read or list larger than one stream's budget is written to the call's job directory for the
  host to fetch; a read only ever opens a regular file, so the files endpoint cannot block.
- ``remove`` refuses a path that resolves to ``/`` or holds a protected directory.
"""

from __future__ import annotations

import binascii
import errno
import json
import os
import stat
import zlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: the compact program drops this block and every annotation
    from typing import Any, List, Optional

    from ._prelude import Frame

from ._agent_frames import COPY_BYTES, FRAME_BYTES, emit, emit_data, ensure_dir, job_dir


def entry(path: str, name: str) -> List[Any]:
    """``[name, kind, is_dir (following links), size of a regular file, mode, mtime_ns, link]``."""
    st = os.lstat(path)
    kind = "other"
    for test, label in (
        (stat.S_ISREG, "file"),
        (stat.S_ISDIR, "dir"),
        (stat.S_ISLNK, "symlink"),
        (stat.S_ISFIFO, "fifo"),
        (stat.S_ISSOCK, "socket"),
        (stat.S_ISCHR, "char"),
        (stat.S_ISBLK, "block"),
    ):
        if test(st.st_mode):
            kind = label
            break
    target = st
    link = None
    if kind == "symlink":
        link = os.readlink(path)
        try:
            target = os.stat(path)
        except OSError:
            pass  # dangling or looping: describe the link itself
    size = target.st_size if stat.S_ISREG(target.st_mode) else None
    return [
        name,
        kind,
        stat.S_ISDIR(target.st_mode),
        size,
        stat.S_IMODE(st.st_mode),
        st.st_mtime_ns,
        link,
    ]


def op_stat(req: Frame) -> Frame:
    """Describe one path."""
    path = req["path"]
    return {"e": entry(path, os.path.basename(path))}


def op_list(req: Frame) -> Frame:
    """List a directory in frames of entries; past the budget the rest spills to a job file."""
    path = req["path"]
    budget = req["budget"]
    sent = 0
    batch: List[Any] = []
    size = 0
    spilled = None
    count = 0
    with os.scandir(path) as entries:
        for item in entries:
            try:
                row = entry(item.path, item.name)
            except FileNotFoundError:
                continue  # removed while we listed
            count += 1
            line = json.dumps(row, separators=(",", ":"))
            if spilled is not None:
                spilled.write(line + "\n")
                continue
            if sent + size + len(line) > budget:
                if batch:
                    emit({"t": "e", "e": batch})
                    batch = []
                spilled = open(os.path.join(job_dir(req), "list"), "w", encoding="ascii")
                spilled.write(line + "\n")
                continue
            batch.append(row)
            size += len(line) + 1
            if size > FRAME_BYTES:
                emit({"t": "e", "e": batch})
                sent += size
                batch, size = [], 0
    if batch:
        emit({"t": "e", "e": batch})
    if spilled is not None:
        spilled.close()
    return {"n": count, "sp": None if spilled is None else spilled.name}


def op_exists(req: Frame) -> Frame:
    """Whether the path exists, following symlinks (a dangling link does not exist)."""
    return {"v": os.path.exists(req["path"])}


def op_realpath(req: Frame) -> Frame:
    """``os.path.realpath``: links resolved, missing components kept, loops not followed."""
    return {"v": os.path.realpath(req["path"])}


def op_mkdir(req: Frame) -> Frame:
    """``mkdir -p``: an existing directory is fine, an existing file is FileExistsError."""
    os.makedirs(req["path"], exist_ok=True)
    return {}


def op_remove(req: Frame) -> Frame:
    """Remove a file, a symlink (itself) or a directory tree; refuse protected paths.

    With ``tree`` false a directory is not removed: ``unlink`` raises IsADirectoryError.
    """
    path = req["path"].rstrip("/") or "/"
    head, name = os.path.split(path)
    if name not in ("", ".", "..") and os.path.islink(path):
        canonical = os.path.join(os.path.realpath(head), name)
    else:
        canonical = os.path.realpath(path)
    for protected in ["/"] + [os.path.realpath(p) for p in req.get("protect", [])]:
        if canonical == protected or protected.startswith(canonical.rstrip("/") + "/"):
            return {"refused": canonical}
    # Remove the checked path itself, not a spelling of it that could resolve differently.
    if stat.S_ISDIR(os.lstat(canonical).st_mode) and req.get("tree", True):
        import shutil

        shutil.rmtree(canonical)
    else:
        os.unlink(canonical)
    return {}


def open_regular(path: str) -> Any:
    """Open for reading without blocking on a FIFO; only regular files pass."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    st = os.fstat(fd)
    if stat.S_ISREG(st.st_mode):
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb"), st
    os.close(fd)
    if stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
    raise OSError(errno.EINVAL, "Not a regular file", path)


def identity(st: os.stat_result) -> List[int]:
    """What must stay the same between the chunks of one read."""
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns]


def copy_range(source: Any, out: str, length: int) -> int:
    """Copy up to ``length`` bytes to a fresh job file, a block at a time."""
    copied = 0
    with open(out, "wb") as target:
        while copied < length:
            block = source.read(min(COPY_BYTES, length - copied))
            if not block:
                break
            target.write(block)
            copied += len(block)
    return copied


def op_read(req: Frame) -> Frame:
    """Small files come back in frames; large ones are named for the host to fetch.

    Up to ``zip`` bytes, a file whose zlib form fits the ``inline`` budget comes back in frames
    too (text usually does), which saves the host a second request.
    """
    handle, st = open_regular(req["path"])
    with handle:
        size = st.st_size
        if req["inline"] < size <= req.get("zip", 0):
            data = handle.read(size)
            packed = zlib.compress(data, 1)
            if len(packed) <= req["inline"]:
                emit_data("d", packed)
                return {"n": len(data), "z": True}
            handle.seek(0)
        if size <= req["inline"]:
            # What was there when it was opened; a file growing meanwhile is read up to that.
            data = handle.read(size)
            emit_data("d", data)
            return {"n": len(data)}
        result: Frame = {"size": size, "id": identity(st)}
        # "copy": the host cannot name this path to the files endpoint (not UTF-8), so it
        # fetches a job copy instead, even of a file that fits one chunk.
        if size > req["chunk"] or req.get("copy"):
            out = os.path.join(job_dir(req), "chunk")
            result["part"] = [out, copy_range(handle, out, req["chunk"])]
        return result


def op_chunk(req: Frame) -> Frame:
    """Copy one chunk of a large file to the job file, if the file is still the same one."""
    handle, st = open_regular(req["path"])
    with handle:
        if identity(st) != req["id"]:
            raise OSError(errno.EAGAIN, "File changed while it was being read", req["path"])
        handle.seek(req["off"])
        out = os.path.join(job_dir(req), "chunk")
        return {"part": [out, copy_range(handle, out, req["len"])]}


def op_write(req: Frame) -> Frame:
    """Write through symlinks into a temporary sibling, then rename it over the target."""
    path = req["path"]
    real = os.path.realpath(path)
    parent, name = os.path.split(real)
    try:
        st: Optional[os.stat_result] = os.stat(real)
    except FileNotFoundError:
        st = None
    if st is None:
        ensure_dir(parent)
    elif stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
    elif not stat.S_ISREG(st.st_mode):
        raise OSError(errno.EINVAL, "Not a regular file", path)
    elif not os.access(real, os.W_OK):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), path)
    temporary = os.path.join(parent, ".lizard-%s.tmp" % req["call"])
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except OSError as exc:  # name the caller's path, not the temporary file it never chose
        raise type(exc)(exc.errno, exc.strerror, path) from None
    written = 0
    try:
        with os.fdopen(fd, "wb") as target:
            if st is not None:
                # Replace, but keep what a rewrite in place would have kept.
                os.fchmod(target.fileno(), stat.S_IMODE(st.st_mode))
                try:
                    os.fchown(target.fileno(), st.st_uid, st.st_gid)
                except OSError:
                    pass
            for piece in req["pieces"]:
                block = binascii.a2b_base64(piece)
                target.write(block)
                written += len(block)
            for staged in req.get("staged", []):
                with open(staged, "rb") as source:
                    while True:
                        block = source.read(COPY_BYTES)
                        if not block:
                            break
                        target.write(block)
                        written += len(block)
                os.unlink(staged)  # frees the disk as the copy proceeds
        os.replace(temporary, real)
        if req.get("staged"):
            try:
                os.rmdir(os.path.dirname(req["staged"][0]))  # the upload's job directory
            except OSError:
                pass
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise
    return {"n": written}
