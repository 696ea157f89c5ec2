"""The agent's channel to the host: frames on stdout, heartbeats, and its job directory.

Part of the agent program (bundled into it by ``lizard_core._guest.source``).

- Every frame is one line (:func:`emit`), written whole under a lock; a host that stopped
  reading stops the agent at the next frame (SIGTERM to itself, so a command is stopped too).
- Bytes go as base64 frames of at most ``FRAME_BYTES`` (a 32 KiB line, half the platform's line
  split); ``sent_bytes`` counts what the exec stream has carried, which the platform caps.
- ``hb`` frames keep a silent operation's stream alive.
"""

from __future__ import annotations

import _thread
import binascii
import errno
import os
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: the compact program drops this block and every annotation
    from typing import List, Optional

    from ._prelude import Frame

from ._prelude import JOBS_ROOT, frame_line

# Raw bytes per data frame: base64 makes a 32 KiB line, half the platform's 64 KiB line split.
FRAME_BYTES = 24 * 1024
COPY_BYTES = 1024 * 1024
HEARTBEAT_S = 2.5
SIGTERM = 15

# Start-up time is paid on every request: the module imports only what every operation needs
# (threads and base64 through their C modules), and each operation imports the rest.
_lock = _thread.allocate_lock()
_last_write = [time.monotonic()]
_host_gone: List[bool] = []
# Bytes written to stdout so far: the platform caps each exec stream, so a command's output
# is measured in what it costs there.
sent_bytes = [0]


def emit(frame: Frame) -> None:
    """Write one frame as one line; a vanished host stops this agent at the next frame."""
    data = frame_line(frame)
    with _lock:
        if _host_gone:
            return
        try:
            sent_bytes[0] += len(data)
            while data:
                data = data[os.write(1, data) :]
        except OSError:
            # Nobody reads our frames any more: stop the operation (op_run kills its group).
            _host_gone.append(True)
            os.kill(os.getpid(), SIGTERM)
        _last_write[0] = time.monotonic()


def heartbeat(interval: float) -> None:
    """Keep the stream alive while an operation is silent (httpx times out idle reads)."""
    while not _host_gone:
        time.sleep(interval / 4)
        beat(interval)


def beat(interval: float) -> float:
    """An ``hb`` frame if nothing was written for ``interval`` s; the seconds until one is due."""
    idle = time.monotonic() - _last_write[0]
    if idle < interval:
        return interval - idle
    emit({"t": "hb"})
    return interval


def b64(data: bytes) -> str:
    """Base64 text for a frame."""
    return binascii.b2a_base64(data, newline=False).decode("ascii")


def emit_data(kind: str, data: bytes, extra: Optional[Frame] = None) -> None:
    """Send bytes as frames of at most ``FRAME_BYTES`` each."""
    for start in range(0, len(data), FRAME_BYTES):
        frame = {"t": kind, "d": b64(data[start : start + FRAME_BYTES])}
        if extra:
            frame.update(extra)
        emit(frame)


def packed_fit(room: int) -> int:
    """How many input bytes surely fit ``room`` bytes of ``z`` frames once deflated.

    Deflate's worst case (incompressible input) is the input plus a few bytes per 16 KiB
    block, a sync flush and some slack; base64 adds a third, and every frame its JSON.
    """
    frames = room // (FRAME_BYTES * 4 // 3) + 1
    payload = (room - 40 * frames) * 3 // 4 - 64
    return max(payload * 1024 // 1027, 0)


def job_dir(req: Frame) -> str:
    """This call's job directory (or the one the host reuses), created on first use, mode 0700."""
    path = req.get("job") or os.path.join(JOBS_ROOT, req["call"])
    if os.path.dirname(os.path.normpath(path)) != JOBS_ROOT:
        raise ValueError("not a job directory: %r" % path)
    os.makedirs(path, mode=0o700, exist_ok=True)
    return path


def ensure_dir(path: str) -> None:
    """``mkdir -p``; a file in the way is NotADirectoryError."""
    try:
        os.makedirs(path, exist_ok=True)
    except FileExistsError:
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), path) from None
