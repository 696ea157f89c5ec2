"""The frames of one request: sent in order by one thread, bounded, spilled past the budget.

Part of the kernel daemon program (bundled into it by ``lizard_core._guest.source``).

- Only the sender thread touches the socket, so an interrupt never cuts a frame in half.
- Output from ``sys.stdout``/``sys.stderr`` and descriptors 1 and 2 is routed to the running
  request's channel, in order within each stream, up to its ``max_output``; a ``cut`` frame marks
  the spot and the rest is counted, not sent.
- Frame lines stay well under the exec stream's 64 KiB line split; a slow reader makes writers
  wait (``QUEUE_MAX``), and the daemon's own log is capped (``LOG_MAX``).
"""

from __future__ import annotations

import _socket
import binascii
import io
import json
import os
import select
import sys
import threading
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: never evaluated, so the daemon runs on Python 3.8
    from typing import Any, Dict, List, Optional

    from ._prelude import Frame

    Bundle = Dict[str, str]

from ._daemon_state import KERNEL_ID, STATE, block_sigint, interrupt_point
from ._prelude import frame_line

# Frame bodies are kept under these sizes so that a frame line stays well under the 64 KiB line
# split of the exec stream (base64 of 24 KiB is 32 KiB).
OUT_CHUNK = 24 * 1024
DATA_CHUNK = 32 * 1024
DATA_FRAME_MAX = 48 * 1024
# Output waits at most this long before it is sent, so a callback sees a line while the cell runs.
FLUSH_DELAY = 0.015
FLUSH_BYTES = 32 * 1024
# A writer waits when this much is queued for a slow reader (backpressure, bounded memory).
QUEUE_MAX = 4 * 1024 * 1024
LOG_MAX = 4 * 1024 * 1024
REQUEST_MAX = 256 * 1024 * 1024


STREAM_NO = {"stdout": 1, "stderr": 2}


def cell_frame(count: int) -> Frame:
    return {"t": "cell", "kernel": KERNEL_ID, "pid": os.getpid(), "n": count}


# Error text longer than this travels in ``et`` frames instead of the end frame.
ERROR_INLINE = 8 * 1024


def error_frames(error: Frame) -> List[Frame]:
    """Move a long message or traceback out of ``error`` into frames, whole and in order.

    A message is never shortened: smolagents' final answer is the message of an exception.
    Returns the frames; ``error`` keeps its name and says which fields come as frames.
    """
    frames = []
    for field in ("message", "traceback"):
        text = error.get(field) or ""
        if len(text) <= ERROR_INLINE:
            continue
        step = DATA_CHUNK
        pos = 0
        while pos < len(text):
            frame = {"t": "et", "f": field, "d": text[pos : pos + step]}
            if len(frame_line(frame)) > DATA_FRAME_MAX and step > 1:
                step = max(1, step // 4)
                continue
            frames.append(frame)
            pos += step
            step = DATA_CHUNK
        error[field] = ""
        error.setdefault("framed", []).append(field)
    return frames


class DaemonLog:
    """The daemon's own log (the file its stdout/stderr pointed at when it started), capped."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.written = 0
        self.lock = threading.Lock()

    def write(self, data: bytes) -> None:
        with self.lock:
            if self.written >= LOG_MAX:
                return
            data = data[: LOG_MAX - self.written]
            self.written += len(data)
            try:
                os.write(self.fd, data)
            except OSError:
                pass


class Channel:
    """The frames of one request, sent to the client by one sender thread.

    Only the sender thread touches the socket, so a KeyboardInterrupt raised in the main thread can
    never cut a frame in half. Output is batched (FLUSH_DELAY, FLUSH_BYTES) and capped per request.
    """

    def __init__(
        self,
        conn: _socket.socket,
        max_output: int,
        budget: Optional[int] = None,
        job: Optional[str] = None,
    ) -> None:
        self.conn = conn
        self.max_output = max_output
        # Frame bytes sent on the stream; past ``budget`` the frames go to ``job``/frames instead
        # (the platform caps a stream's output, so large answers travel as a file).
        self.budget = budget
        self.job = job
        self.sent_bytes = 0
        self.spill: Optional[Any] = None  # the open spill file
        self.spill_path: Optional[str] = None
        # A plain lock: every write of the cell passes here, and an RLock costs twice as much.
        self.cond = threading.Condition(threading.Lock())
        self.frames: List[bytes] = []  # encoded lines, in order
        self.queued = 0
        self.pending: List[Any] = []  # [stream, bytearray] output not yet framed
        self.pending_size = 0
        self.pending_since = 0.0
        self.sent_output = 0
        self.dropped = {"stdout": 0, "stderr": 0}
        self.closing = False
        self.done = False
        self.broken = False
        # Started by the first output or frame of a running cell. While no cell code runs the
        # main thread sends itself: a trivial cell then costs no thread handoff at all.
        self.thread: Optional[threading.Thread] = None

    def _start_locked(self) -> None:
        if self.thread is None:
            self.thread = threading.Thread(
                target=self._run, name="lizard-kernel-sender", daemon=True
            )
            self.thread.start()

    # Called from any thread.
    def output(self, stream: str, data: bytes) -> None:
        if not data:
            return
        with self.cond:
            room = self.max_output - self.sent_output
            if room <= 0:
                self.dropped[stream] += len(data)
                return
            if len(data) > room:
                self.dropped[stream] += len(data) - room
                data = data[:room]
                self.sent_output += room
                self._add_output(stream, data)
                self._frame_pending_locked()
                self._append_locked(
                    frame_line({"t": "cut", "s": STREAM_NO[stream], "limit": self.max_output})
                )
                return
            self.sent_output += len(data)
            self._add_output(stream, data)
            if self.pending_size >= FLUSH_BYTES:
                self.cond.notify_all()
            if self.queued > QUEUE_MAX:
                self._wait_for_room_locked()

    def _add_output(self, stream: str, data: bytes) -> None:
        self._start_locked()
        if not self.pending:
            self.pending_since = time.monotonic()
            self.cond.notify_all()
        if self.pending and self.pending[-1][0] == stream:
            self.pending[-1][1] += data
        else:
            self.pending.append([stream, bytearray(data)])
        self.pending_size += len(data)

    def frame(self, obj: Frame) -> None:
        with self.cond:
            if self.thread is None and not STATE.executing:
                self._send(frame_line(obj))
                return
            self._start_locked()
            self._frame_pending_locked()
            self._append_locked(frame_line(obj))
            self._wait_for_room_locked()

    def _append_locked(self, line: bytes) -> None:
        self.frames.append(line)
        self.queued += len(line)
        self.cond.notify_all()

    def _frame_pending_locked(self) -> None:
        for stream, data in self.pending:
            for i in range(0, len(data), OUT_CHUNK):
                chunk = bytes(data[i : i + OUT_CHUNK])
                piece = binascii.b2a_base64(chunk, newline=False).decode("ascii")
                self._append_locked(frame_line({"t": "o", "s": STREAM_NO[stream], "d": piece}))
        self.pending = []
        self.pending_size = 0

    def _wait_for_room_locked(self) -> None:
        # Only writers in other threads than the sender wait; the wait is interruptible.
        while self.queued > QUEUE_MAX and not self.broken and not self.done:
            self.cond.wait(0.5)

    def finish(self, final: Frame) -> None:
        """Drain every queued frame, then send the final frame (naming the spill file, if any).

        Called from the main thread once no cell code runs any more, so no KeyboardInterrupt can
        land in the final send.
        """
        if self.thread is not None:
            with self.cond:
                self._frame_pending_locked()
                self.closing = True
                self.cond.notify_all()
            self.thread.join()
        if self.spill is not None:
            try:
                self.spill.close()
            except OSError:
                pass
            final["spill"] = self.spill_path
        if not self.broken:
            try:
                self.conn.sendall(frame_line(final))
            except OSError:
                self.broken = True

    def _send(self, batch: bytes) -> None:
        """Send a batch of frame lines, or write it to the spill file once past the budget."""
        if self.spill is None and self.budget is not None and self.job:
            room = self.budget - self.sent_bytes
            if len(batch) > room:
                cut = batch.rfind(b"\n", 0, max(room, 0)) + 1
                head, batch = batch[:cut], batch[cut:]
                self._to_socket(head)
                try:
                    os.makedirs(self.job, mode=0o700, exist_ok=True)
                    self.spill_path = os.path.join(self.job, "frames")
                    self.spill = open(self.spill_path, "wb")
                except OSError:
                    self.spill = None
                    self.job = None  # cannot spill: stream on and let the platform decide
        if self.spill is not None:
            try:
                self.spill.write(batch)
            except OSError:
                self.broken = True
            return
        self._to_socket(batch)

    def _to_socket(self, batch: bytes) -> None:
        if batch and not self.broken:
            try:
                self.conn.sendall(batch)
                self.sent_bytes += len(batch)
            except OSError:
                self.broken = True

    def _run(self) -> None:
        block_sigint()
        while True:
            with self.cond:
                while True:
                    if self.frames or self.closing:
                        break
                    if self.pending:
                        left = self.pending_since + FLUSH_DELAY - time.monotonic()
                        if left <= 0 or self.pending_size >= FLUSH_BYTES:
                            self._frame_pending_locked()
                            break
                        self.cond.wait(left)
                    else:
                        self.cond.wait()
                batch = b"".join(self.frames)
                self.frames = []
                self.queued = 0
                last = self.closing
                self.cond.notify_all()
            if batch:
                self._send(batch)
            if last:
                with self.cond:
                    if not self.frames:
                        self.done = True
                        self.cond.notify_all()
                        return


class Router:
    """Where cell output goes: the current request's channel, or the daemon log between requests."""

    def __init__(self, log: DaemonLog) -> None:
        self.log = log
        self.channel: Optional[Channel] = None
        self.forked = False
        self.partial = {"stdout": b"", "stderr": b""}

    def write(self, stream: str, data: bytes) -> None:
        if self.forked:
            # A child forked by a cell (multiprocessing): the parent's reader thread captures
            # its descriptors 1 and 2, so writing there keeps its output in the cell's stream.
            # Whole lines per write, as a line-buffered stream would, so that concurrent workers
            # do not interleave within a line.
            data = self.partial[stream] + data
            cut = data.rfind(b"\n") + 1
            if len(data) - cut > 65536:
                cut = len(data)
            self.partial[stream] = data[cut:]
            self._write_fd(stream, data[:cut])
            return
        channel = self.channel
        if channel is None:
            self.log.write(data)
        else:
            channel.output(stream, data)

    def flush(self, stream: str) -> None:
        if self.forked and self.partial[stream]:
            data, self.partial[stream] = self.partial[stream], b""
            self._write_fd(stream, data)

    @staticmethod
    def _write_fd(stream: str, data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(STREAM_NO[stream], view) :]
            except OSError:
                return

    def after_fork_in_child(self) -> None:
        """The channel's sender thread does not exist in a forked child: never queue for it."""
        self.forked = True
        self.channel = None


class FdCapture:
    """Captures file descriptors 1 and 2 through pipes, so subprocess and C output is streamed.

    A reader thread forwards what arrives; ``drain`` hands over what is already in the pipes, so
    that Python-level writes that follow it, and the final frame, come after it.
    """

    def __init__(self, router: Router) -> None:
        self.router = router
        self.lock = threading.Lock()
        self.fds = {}
        # fd -> a private copy of its pipe's write end, so that a cell that closes (or replaces)
        # descriptor 1 or 2 does not take the output of every later cell with it.
        self.writers = {}
        for fd, stream in ((1, "stdout"), (2, "stderr")):
            r, w = os.pipe()
            os.dup2(w, fd)
            self.writers[fd] = w
            os.set_blocking(r, False)
            self.fds[r] = stream
        self.poller = select.poll()
        for fd in self.fds:
            self.poller.register(fd, select.POLLIN)
        threading.Thread(target=self._run, name="lizard-kernel-fds", daemon=True).start()

    def restore(self) -> None:
        """Point descriptors 1 and 2 at their pipes again, should a cell have changed them.

        Called as each cell ends, while no descriptor of the daemon's own can sit at 1 or 2.
        """
        for fd, writer in self.writers.items():
            try:
                same = os.path.samestat(os.fstat(fd), os.fstat(writer))
            except OSError:
                same = False
            if not same:
                os.dup2(writer, fd)

    def _read_locked(self, fd: int) -> None:
        while True:
            try:
                data = os.read(fd, 65536)
            except (BlockingIOError, InterruptedError):
                return
            if not data:
                return
            self.router.write(self.fds[fd], data)

    def drain(self) -> None:
        if self.router.forked:
            return  # the pipes are the parent's to read
        # Runs before every Python-level write, so the common case (nothing waiting) is one
        # poll(0). Empty pipes with the lock free mean nothing is in flight: the reader thread
        # holds the lock from its read until the data is handed over.
        if not self.poller.poll(0) and not self.lock.locked():
            return
        with self.lock:
            for fd in self.fds:
                self._read_locked(fd)

    def _run(self) -> None:
        block_sigint()
        fds = list(self.fds)
        while True:
            try:
                ready, _, _ = select.select(fds, [], [])
            except InterruptedError:
                continue
            with self.lock:
                for fd in ready:
                    self._read_locked(fd)


class CellStream(io.TextIOBase):
    """``sys.stdout``/``sys.stderr`` while the daemon runs: UTF-8 text to the router, unbuffered."""

    def __init__(self, name: str, fd: int, router: Router, capture: FdCapture) -> None:
        self._name = name
        self._fd = fd
        self._router = router
        self._capture = capture
        self.buffer = _CellBuffer(self)

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return "utf-8"

    @property
    def errors(self) -> str:  # type: ignore[override]
        return "backslashreplace"

    @property
    def name(self) -> str:
        return "<%s>" % self._name

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        return self._fd

    def write(self, text: str) -> int:
        if not isinstance(text, str):
            raise TypeError("write() argument must be str, not %s" % type(text).__name__)
        self.write_bytes(text.encode("utf-8", "backslashreplace"))
        return len(text)

    def write_bytes(self, data: bytes) -> None:
        # Bytes a subprocess already wrote to the same descriptor go first.
        self._capture.drain()
        self._router.write(self._name, data)
        if STATE.deferred:
            interrupt_point()

    def flush(self) -> None:
        self._router.flush(self._name)


class _CellBuffer(io.RawIOBase):
    """``sys.stdout.buffer``: bytes written straight through."""

    def __init__(self, stream: CellStream) -> None:
        self._stream = stream

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        data = bytes(data)
        self._stream.write_bytes(data)
        return len(data)

    def fileno(self) -> int:
        return self._stream.fileno()


def read_request(conn: _socket.socket) -> Optional[Frame]:
    conn.settimeout(30)
    chunks: List[bytes] = []
    size = 0
    while True:
        data = conn.recv(1 << 20)
        if not data:
            if not chunks:
                return None  # a readiness probe: connected, then closed
            raise ValueError("connection closed before the request was complete")
        chunks.append(data)
        size += len(data)
        if data.endswith(b"\n"):
            break
        if size > REQUEST_MAX:
            raise ValueError("request too large")
    conn.settimeout(None)
    request: Frame = json.loads(b"".join(chunks))
    return request


def mark_busy(path: str, conn: _socket.socket) -> None:
    """Name the client this connection serves (its pid) in the file ``path``, ``busy``.

    A client queued behind this one reads it: when the named client is gone (cancelled, killed)
    and its cell does not stop, the queued client restarts the kernel rather than wait forever.
    """
    try:
        creds = conn.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, 12)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, b"%d\n" % int.from_bytes(creds[:4], sys.byteorder, signed=True))
        finally:
            os.close(fd)
    except OSError:
        pass
