"""Persistent Python kernel daemon: one namespace per sandbox, served on a private Unix socket.

Standard library only, Python 3.8+. ``kernel_client`` starts it as ``python3 <this file> DIR CWD``,
detached (own session and process group, stdin from /dev/null, stdout and stderr to
``DIR/daemon.log``), and talks to it through ``DIR/sock``; DIR is a 0700 directory that the client
has created and checked.

Contract with the client:

- One connection carries one request, a JSON object on one line. The daemon answers with frame
  lines in the guest protocol's shape (compact JSON objects with a type ``t``, each well under the
  64 KiB line split), ready to relay verbatim, and closes the connection after the last. The first
  frame is ``cell``, the last is ``end``.
- ``{"op": "execute", "code", "env", "timeout", "grace", "max_output", "max_result"}`` runs a cell
  the way IPython runs it: the statements, then the last expression, whose value becomes the main
  rich result (``text/plain`` always; ``image/png`` for PIL images, matplotlib figures and
  ``_repr_png_``; ``text/html``, ``application/json`` and the other ``_repr_*_`` forms when the
  object offers them; DataFrames also as JSON). Matplotlib figures left open by the cell are sent
  as PNG results and closed. Every BaseException (KeyboardInterrupt, SystemExit, an exception
  class defined in the cell) is reported by class name and message, and the daemon lives on.
  ``env`` is applied to ``os.environ`` for the cell only.
- Output written to ``sys.stdout``/``sys.stderr`` and to file descriptors 1 and 2 (subprocesses,
  C code) is streamed while the cell runs, in order within each stream, up to ``max_output``
  bytes per request; past that a ``cut`` frame marks the spot and the rest is counted, not sent.
- With ``budget`` and ``job`` in the request, at most ``budget`` bytes of frame lines go to the
  socket; the frames after them are written, unchanged and in order, to ``job/frames`` (created
  0700), and the ``end`` frame names that file as ``spill``: the exec stream's output is capped
  by the platform, so a large answer travels as a file.
- Timeout: at ``timeout`` seconds the cell gets SIGINT (KeyboardInterrupt, namespace kept), again
  every half second during ``grace``, and the error is reported as ``TimeoutError``. A cell that
  still runs after that is the client's to kill. A client that disconnects interrupts its cell.
- ``{"op": "install", "packages", "timeout", "pip_args"}`` runs pip in a subprocess (output
  streamed), then puts the user site on ``sys.path`` and invalidates import caches, so the new
  packages import without a restart.
- ``{"op": "ping"}`` answers ``cell`` and ``end`` only (readiness and identity).
- While a connection is served, ``DIR/busy`` holds the pid of the client on its other end, so
  that a client queued behind an orphaned cell (its client killed) can tell and restart the
  kernel (see ``kernel_client``).

What the daemon bounds for a cell that behaves: output per request (``max_output``), each rich
value (``max_result``), frame lines (under 64 KiB), the queue to a slow reader (``QUEUE_MAX``),
the request it reads (``REQUEST_MAX``) and its own log (``LOG_MAX``). It cannot bound a cell that
does not behave (cell code runs in this process and can reach everything here), so the host
validates and bounds whatever arrives on its own (``lizard_core._kernel_frames``, ``_spill``).
Descriptors 1 and 2 are pointed at their pipes again after every cell, so a cell that closes them
does not silence later cells.

Frames: ``cell`` (kernel id, pid, execution count ``n``), ``o`` (stream ``s`` 1 or 2, base64
bytes ``d``), ``cut`` (stream, limit), ``res`` (result index ``i``, ``main`` flag, ``omit``: mime
types left out for size), ``rd`` (index, mime type ``m``, a piece ``d`` of the value; pieces of one
value arrive in order), ``et`` (field ``f``, a piece ``d`` of an error's message or traceback too
long for the end frame; the error then lists the field in ``framed``), ``end`` (``n``, ``error``
{name, message, traceback} or null,
``timed_out``, ``dropped`` [stdout, stderr] bytes past the limit, ``ms`` spent on the request,
``spill`` when frames went to a file).
"""

from __future__ import annotations
import __future__

import ast
import base64
import builtins
import io
import json
import linecache
import os
import re
import select
import signal
import socket
import sys
import threading
import time
import traceback
import types
import warnings
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: never evaluated, so the daemon runs on Python 3.8
    from typing import Any, Dict, List, Optional, Tuple

    Frame = Dict[str, Any]
    Bundle = Dict[str, str]

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
REQUEST_MAX = 256 * 1024 * 1024
LOG_MAX = 4 * 1024 * 1024
DATAFRAME_JSON_MAX_CELLS = 100000
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
HERE = os.path.abspath(__file__)

FUTURE_FLAGS = [getattr(__future__, name).compiler_flag for name in __future__.all_feature_names]
TOP_LEVEL_AWAIT = getattr(ast, "PyCF_ALLOW_TOP_LEVEL_AWAIT", 0)
CO_COROUTINE = 0x80

DAEMON_PID = os.getpid()
KERNEL_ID = base64.b16encode(os.urandom(8)).decode().lower()
_main_thread_id = threading.main_thread().ident or 0


STREAM_NO = {"stdout": 1, "stderr": 2}


def cell_frame(count: int) -> Frame:
    return {"t": "cell", "kernel": KERNEL_ID, "pid": os.getpid(), "n": count}


def block_sigint() -> None:
    """Block SIGINT in the calling daemon thread (each calls this first).

    A SIGINT sent to the process must reach the main thread, where it interrupts a blocking call
    (sleep, read) and raises KeyboardInterrupt.
    """
    try:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    except (AttributeError, OSError, ValueError):
        pass


def client_gone(conn: socket.socket) -> bool:
    """True when the client closed its end (it never sends after the request)."""
    try:
        r, _, _ = select.select([conn], [], [], 0)
        if r:
            return conn.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True
    return False


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


class Log:
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
        conn: socket.socket,
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
                piece = base64.b64encode(bytes(data[i : i + OUT_CHUNK])).decode("ascii")
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

    def __init__(self, log: Log) -> None:
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


class Watchdog:
    """Interrupts the running cell when its time is up, or when its client went away.

    One thread for the daemon's life, armed for each cell and disarmed after it, so a cell costs
    no thread start or join (each is a scheduling round trip on a busy machine).
    """

    def __init__(self) -> None:
        self.cond = threading.Condition(threading.Lock())
        self.armed: Optional[Tuple[Optional[float], socket.socket]] = (
            None  # (deadline or None, conn) of the running cell
        )
        self.timed_out = False
        self.client_gone = False
        self.thread = threading.Thread(target=self._run, name="lizard-kernel-watchdog", daemon=True)
        self.thread.start()

    def arm(self, timeout: Optional[float], conn: socket.socket) -> None:
        with self.cond:
            self.timed_out = False
            self.client_gone = False
            deadline = time.monotonic() + timeout if timeout else None
            self.armed = (deadline, conn)
            self.cond.notify_all()

    def disarm(self) -> None:
        with self.cond:
            self.armed = None

    def _run(self) -> None:
        block_sigint()
        while True:
            with self.cond:
                while self.armed is None:
                    self.cond.wait()
                armed = self.armed
                deadline, conn = armed
                next_signal = deadline
                while self.armed is armed:
                    self.cond.wait(0.1)
                    if self.armed is not armed:
                        break
                    now = time.monotonic()
                    if not self.client_gone and client_gone(conn):
                        self.client_gone = True
                        next_signal = now
                    if next_signal is not None and now >= next_signal:
                        if deadline is not None and now >= deadline:
                            self.timed_out = True
                        # Sent under the lock, so never after disarm(); a signal that lands
                        # after the cell ended is dropped by on_sigint.
                        try:
                            signal.pthread_kill(_main_thread_id, signal.SIGINT)
                        except (OSError, ValueError):
                            pass
                        # Again every half second: a bare ``except:`` in the cell swallows one.
                        next_signal = now + 0.5


class State:
    """What the signal handler needs to know about the main thread."""

    def __init__(self) -> None:
        self.executing = False
        self.deferred = False
        self.count = 0


STATE = State()


def on_sigint(signum: int, frame: Any) -> None:
    """Raise KeyboardInterrupt in the running cell, never in the daemon's own code.

    Between cells the signal is dropped. While the daemon's code runs for the cell (framing
    output, formatting results) it is deferred to the next safe point (``interrupt_point``), so a
    frame or the namespace bookkeeping is never left half done.
    """
    if not STATE.executing:
        return
    if frame is not None and frame.f_code.co_filename == HERE:
        STATE.deferred = True
        return
    raise KeyboardInterrupt


def interrupt_point() -> None:
    """Deliver a deferred interrupt; called where the daemon hands control back to the cell."""
    if STATE.deferred and STATE.executing:
        STATE.deferred = False
        raise KeyboardInterrupt


def without_daemon_frames(te: traceback.TracebackException) -> traceback.TracebackException:
    """Drop the daemon's own frames from a TracebackException and the exceptions chained to it."""
    seen = set()
    todo: List[Optional[traceback.TracebackException]] = [te]
    while todo:
        item = todo.pop()
        if item is None or id(item) in seen:
            continue
        seen.add(id(item))
        item.stack = traceback.StackSummary.from_list([f for f in item.stack if f.filename != HERE])
        todo.append(item.__cause__)
        todo.append(item.__context__)
        todo.extend(getattr(item, "exceptions", None) or [])
    return te


def describe_error(exc: BaseException) -> Frame:
    """Class name, message and an ANSI-free traceback that shows only the cell's frames."""
    name = type(exc).__name__
    try:
        message = str(exc)
    except BaseException:
        message = "<unprintable %s>" % name
    try:
        te = traceback.TracebackException(type(exc), exc, exc.__traceback__, compact=True)
    except TypeError:  # Python < 3.10 has no ``compact``
        te = traceback.TracebackException(type(exc), exc, exc.__traceback__)
    try:
        text = ANSI.sub("", "".join(without_daemon_frames(te).format()))
    except BaseException:
        text = "%s: %s\n" % (name, message)
    return {"name": name, "message": message, "traceback": text}


class CellNotCompiled(Exception):
    """Wraps the error that kept a cell from compiling (no frame of the cell ever ran)."""


def describe_compile_error(exc: BaseException) -> Frame:
    """A syntax error as Python prints it: the line and a caret, no stack."""
    text = "".join(traceback.format_exception_only(type(exc), exc))
    return {"name": type(exc).__name__, "message": str(exc), "traceback": ANSI.sub("", text)}


# Mime types offered through IPython's ``_repr_*_`` protocol, in IPython's order of preference.
REPR_METHODS = (
    ("_repr_png_", "image/png"),
    ("_repr_jpeg_", "image/jpeg"),
    ("_repr_svg_", "image/svg+xml"),
    ("_repr_html_", "text/html"),
    ("_repr_markdown_", "text/markdown"),
    ("_repr_latex_", "text/latex"),
    ("_repr_json_", "application/json"),
)


def png_of_figure(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode("ascii")


def png_of_pil(image: Any) -> str:
    buf = io.BytesIO()
    try:
        image.save(buf, format="PNG")
    except (OSError, ValueError, KeyError):
        buf = io.BytesIO()
        image.convert("RGBA").save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode("ascii")


def is_instance_of(value: object, module: str, name: str) -> bool:
    mod = sys.modules.get(module)
    cls = getattr(mod, name, None) if mod is not None else None
    return isinstance(cls, type) and isinstance(value, cls)


def rich_bundle(value: Any) -> Bundle:
    """Mime type -> string for a value; images are base64. Raises what the value's code raises."""
    data = {}
    if is_instance_of(value, "matplotlib.figure", "Figure"):
        data["image/png"] = png_of_figure(value)
    elif is_instance_of(value, "PIL.Image", "Image"):
        data["image/png"] = png_of_pil(value)
    cls = type(value)
    for method, mime in REPR_METHODS:
        if mime in data or (mime == "image/jpeg" and "image/png" in data):
            continue
        # Looked up on the type, so objects answering every attribute (mocks, proxies) are skipped.
        func = getattr(cls, method, None)
        if func is None or not callable(func):
            continue
        try:
            out = getattr(value, method)()
        except Exception:
            continue
        if isinstance(out, tuple) and len(out) == 2:
            out = out[0]  # (data, metadata)
        if out is None:
            continue
        if mime == "application/json":
            if not isinstance(out, str):
                out = json.dumps(out, default=str)
        elif isinstance(out, bytes):
            if mime.startswith("image/") and mime != "image/svg+xml":
                out = base64.b64encode(out).decode("ascii")
            else:
                out = out.decode("utf-8", "replace")
        if isinstance(out, str):
            data[mime] = out
    if "application/json" not in data and is_instance_of(value, "pandas", "DataFrame"):
        try:
            if value.size <= DATAFRAME_JSON_MAX_CELLS:
                data["application/json"] = value.to_json(
                    orient="split", date_format="iso", default_handler=str
                )
        except Exception:
            pass
    data["text/plain"] = repr(value)
    return data


def cap_bundle(data: Bundle, limit: int) -> Tuple[Bundle, List[str]]:
    """Cap each value of a bundle: text/plain is cut with a marker; anything else is omitted."""
    kept, omitted = {}, []
    for mime, text in data.items():
        if len(text) <= limit:
            kept[mime] = text
        elif mime == "text/plain":
            kept[mime] = text[:limit] + "\n[lizard: value cut at %d of %d characters]" % (
                limit,
                len(text),
            )
        else:
            omitted.append(mime)
    return kept, omitted


class Kernel:
    """The namespace and the cells run in it."""

    def __init__(self, router: Router, capture: FdCapture, log: Log) -> None:
        self.router = router
        self.capture = capture
        self.log = log
        self.future_flags = 0
        self.module = types.ModuleType("__main__")
        self.ns = self.module.__dict__
        self.ns["__builtins__"] = builtins
        self.ns["display"] = self.display
        # Classes and functions defined in cells live in the importable ``__main__`` module, so
        # pickle, dataclasses and typing find them by name.
        sys.modules["__main__"] = self.module
        self.stdout = CellStream("stdout", 1, router, capture)
        self.stderr = CellStream("stderr", 2, router, capture)
        self.channel: Optional[Channel] = None
        self.result_index = 0
        self.max_result = 0
        self.loop: Any = None
        self.watchdog = Watchdog()

    def reset_streams(self) -> None:
        sys.stdout = self.stdout
        sys.stderr = self.stderr
        if sys.stdin is None or sys.stdin.closed:  # exit() closes it
            sys.stdin = open(os.devnull)

    # -- results -------------------------------------------------------------------------------
    def send_result(self, data: Bundle, main: bool) -> None:
        kept, omitted = cap_bundle(data, self.max_result)
        channel = self.channel
        assert channel is not None  # results are sent while a request is served
        index = self.result_index
        self.result_index += 1
        channel.frame({"t": "res", "i": index, "main": main, "omit": omitted})
        for mime, text in kept.items():
            step = DATA_CHUNK
            pos = 0
            while pos < len(text) or (pos == 0 and not text):
                piece = text[pos : pos + step]
                line = frame_line({"t": "rd", "i": index, "m": mime, "d": piece})
                if len(line) > DATA_FRAME_MAX and step > 1:
                    step = max(1, step // 4)
                    continue
                channel.frame({"t": "rd", "i": index, "m": mime, "d": piece})
                pos += len(piece)
                if not text:
                    break
                step = DATA_CHUNK

    def display(self, *objs: object) -> None:
        """Show each object as a rich result of the running cell (IPython's ``display``)."""
        for obj in objs:
            if self.channel is not None:
                self.send_result(rich_bundle(obj), False)
        interrupt_point()

    def collect_figures(self, skip: object, bundles: List[Tuple[Bundle, bool]]) -> None:
        """Every matplotlib figure the cell left open, as a PNG result; each is closed."""
        plt = sys.modules.get("matplotlib.pyplot")
        if plt is None:
            return
        for num in list(plt.get_fignums()):
            fig = plt.figure(num)
            try:
                if fig is not skip:
                    bundles.append(
                        ({"image/png": png_of_figure(fig), "text/plain": repr(fig)}, False)
                    )
            finally:
                plt.close(fig)

    # -- running code --------------------------------------------------------------------------
    def compile_cell(
        self, code: str, filename: str
    ) -> Tuple[types.CodeType, Optional[types.CodeType]]:
        """Compile a cell into its statements and, when it ends with one, its last expression."""
        tree = ast.parse(code, filename, "exec")
        last: Optional[ast.Expr] = None
        # As in IPython, a trailing semicolon hides the value.
        final_statement = tree.body[-1] if tree.body else None
        if isinstance(final_statement, ast.Expr) and not code.rstrip().endswith(";"):
            last = final_statement
            tree.body.pop()
        body = self.compile_tracked(ast.Module(body=tree.body, type_ignores=[]), filename, "exec")
        expr = None
        if last is not None:
            expr = self.compile_tracked(ast.Expression(body=last.value), filename, "eval")
        return body, expr

    def compile_tracked(self, node: ast.AST, filename: str, mode: str) -> types.CodeType:
        code: types.CodeType = compile(
            node,  # type: ignore[call-overload]  # Module or Expression
            filename,
            mode,
            self.future_flags | TOP_LEVEL_AWAIT,
            True,
        )
        # A __future__ import holds for the cells after it too, as in IPython.
        for flag in FUTURE_FLAGS:
            if code.co_flags & flag:
                self.future_flags |= flag
        return code

    def run_code(self, code_obj: types.CodeType) -> Any:
        result = eval(code_obj, self.ns)
        if code_obj.co_flags & CO_COROUTINE:  # the cell used top-level await
            import asyncio

            if self.loop is None or self.loop.is_closed():
                self.loop = asyncio.new_event_loop()
            result = self.loop.run_until_complete(result)
        return result

    def execute(self, req: Frame, channel: Channel, conn: socket.socket) -> Frame:
        STATE.count += 1
        count = STATE.count
        code = req.get("code", "")
        filename = "<cell-%d>" % count
        linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
        self.max_result = int(req.get("max_result") or 4 * 1024 * 1024)
        self.result_index = 0
        channel.frame(cell_frame(count))
        saved_env = self.apply_env(req.get("env") or {})
        error = None
        shown = None
        self.channel = channel
        self.router.channel = channel
        self.reset_streams()
        signal.signal(signal.SIGINT, on_sigint)
        watchdog = self.watchdog
        bundles = []
        started = time.monotonic()
        watchdog.arm(req.get("timeout"), conn)
        try:
            try:
                STATE.deferred = False
                STATE.executing = True
                try:
                    try:
                        body, expr = self.compile_cell(code, filename)
                    except (SyntaxError, ValueError, OverflowError, RecursionError) as exc:
                        raise CellNotCompiled(exc) from None
                    self.run_code(body)
                    if expr is not None:
                        value = self.run_code(expr)
                        if value is not None:
                            self.ns["_"] = value
                            shown = value
                            # Formatting runs the value's own code, so it stays interruptible;
                            # sending waits until no cell code runs.
                            bundles.append((rich_bundle(value), True))
                except CellNotCompiled as exc:
                    error = describe_compile_error(exc.args[0])
                except BaseException as exc:
                    error = describe_error(exc)
                try:
                    self.collect_figures(shown, bundles)
                except BaseException as exc:
                    if error is None:
                        error = describe_error(exc)
                STATE.executing = False
            except KeyboardInterrupt as exc:
                # An interrupt that landed in the daemon's own bookkeeping above.
                STATE.executing = False
                if error is None:
                    error = describe_error(exc)
        finally:
            if os.getpid() != DAEMON_PID:
                # A child forked by the cell that ran on to here: it must never serve requests.
                os._exit(0)
            STATE.executing = False
            watchdog.disarm()
            # Now, before the daemon opens anything (the next connection) that could take a
            # descriptor the cell closed.
            self.capture.restore()
        elapsed = time.monotonic() - started
        for stream in (sys.__stdout__, sys.__stderr__):
            try:
                if stream is not None:
                    stream.flush()
            except (OSError, ValueError):
                pass
        self.capture.drain()
        self.router.channel = None
        for bundle, main in bundles:
            self.send_result(bundle, main)
        self.channel = None
        self.restore_env(saved_env)
        if watchdog.timed_out:
            original = error
            error = {
                "name": "TimeoutError",
                "message": "the cell ran longer than its %g s timeout and was interrupted"
                % float(req.get("timeout") or 0),
                "traceback": original["traceback"] if original else "",
            }
        return {
            "t": "end",
            "kernel": KERNEL_ID,
            "n": count,
            "error": error,
            "timed_out": watchdog.timed_out,
            "client_gone": watchdog.client_gone,
            "dropped": [channel.dropped["stdout"], channel.dropped["stderr"]],
            "ms": round(elapsed * 1000, 3),
        }

    @staticmethod
    def apply_env(env: Dict[str, str]) -> Dict[str, Optional[str]]:
        saved = {}
        for key, value in env.items():
            saved[key] = os.environ.get(key)
            os.environ[key] = value
        return saved

    @staticmethod
    def restore_env(saved: Dict[str, Optional[str]]) -> None:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value

    # -- installing packages -------------------------------------------------------------------
    def install(self, req: Frame, channel: Channel) -> Frame:
        import importlib
        import site
        import subprocess

        channel.frame(cell_frame(STATE.count))
        packages = [str(p) for p in req.get("packages") or []]
        timeout: Optional[float] = req.get("timeout") or None
        self.router.channel = channel
        base = [sys.executable, "-m", "pip", "install", "--disable-pip-version-check", "--no-input"]
        base += [str(a) for a in req.get("pip_args") or []]
        started = time.monotonic()
        error = None
        timed_out = False
        tail = bytearray()
        attempts = [base + ["--"] + packages]
        while attempts:
            argv = attempts.pop(0)
            tail = bytearray()
            try:
                proc = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            except OSError as exc:
                error = {
                    "name": "PipError",
                    "message": "could not run pip: %s" % exc,
                    "traceback": "",
                }
                break
            deadline = None if timeout is None else time.monotonic() + timeout
            assert proc.stdout is not None
            fd = proc.stdout.fileno()
            while True:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    timed_out = True
                    try:
                        os.killpg(proc.pid, signal.SIGKILL)
                    except OSError:
                        pass
                    break
                r, _, _ = select.select([fd], [], [], 0.5 if left is None else min(0.5, left))
                if r:
                    data = os.read(fd, 65536)
                    if not data:
                        break
                    tail += data
                    del tail[:-65536]
                    channel.output("stdout", data)
            proc.stdout.close()
            rc = proc.wait()
            if timed_out:
                error = {
                    "name": "TimeoutError",
                    "message": "pip did not finish within %g s and was stopped" % (timeout or 0),
                    "traceback": "",
                }
                break
            if rc == 0:
                error = None
                break
            text = tail.decode("utf-8", "replace")
            if "externally-managed-environment" in text and "--break-system-packages" not in argv:
                # A disposable sandbox: a distribution's "managed" marker must not block installs.
                attempts.append(base + ["--break-system-packages", "--"] + packages)
                channel.output("stdout", b"[lizard: retrying with --break-system-packages]\n")
                continue
            if "No module named pip" in text:
                message = "pip is not available for %s" % sys.executable
            else:
                lines = [line for line in text.strip().splitlines() if line.strip()]
                message = "pip exited with code %d: %s" % (rc, lines[-1] if lines else "no output")
            error = {"name": "PipError", "message": message, "traceback": text[-8000:]}
        self.router.channel = None
        # The user site may not have existed when the interpreter started.
        user_site = site.getusersitepackages() if site.ENABLE_USER_SITE else None
        if user_site and os.path.isdir(user_site) and user_site not in sys.path:
            system = set(site.getsitepackages()) if hasattr(site, "getsitepackages") else set()
            positions = [i for i, p in enumerate(sys.path) if p in system]
            sys.path.insert(min(positions) if positions else len(sys.path), user_site)
        if user_site and os.path.isdir(user_site):
            site.addsitedir(user_site)  # runs .pth files; the path is already present
        importlib.invalidate_caches()
        return {
            "t": "end",
            "kernel": KERNEL_ID,
            "n": STATE.count,
            "error": error,
            "timed_out": timed_out,
            "client_gone": False,
            "dropped": [channel.dropped["stdout"], channel.dropped["stderr"]],
            "ms": round((time.monotonic() - started) * 1000, 3),
        }

    def ping(self, channel: Channel) -> Frame:
        channel.frame(cell_frame(STATE.count))
        return {
            "t": "end",
            "kernel": KERNEL_ID,
            "n": STATE.count,
            "error": None,
            "timed_out": False,
            "client_gone": False,
            "dropped": [0, 0],
            "ms": 0,
        }


def read_request(conn: socket.socket) -> Optional[Frame]:
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


def mark_busy(path: str, conn: socket.socket) -> None:
    """Name the client this connection serves (its pid) in the file ``path``, ``busy``.

    A client queued behind this one reads it: when the named client is gone (cancelled, killed)
    and its cell does not stop, the queued client restarts the kernel rather than wait forever.
    """
    try:
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, b"%d\n" % int.from_bytes(creds[:4], sys.byteorder, signed=True))
        finally:
            os.close(fd)
    except OSError:
        pass


def serve(kernel: Kernel, listener: socket.socket, log: Log, directory: str) -> None:
    busy = os.path.join(directory, "busy")
    while True:
        try:
            conn, _ = listener.accept()
        except InterruptedError:
            continue
        except OSError as exc:
            log.write(("accept failed: %s\n" % exc).encode())
            return
        try:
            mark_busy(busy, conn)
            handle(kernel, conn, log)
        except BaseException as exc:  # one bad request never takes the namespace down
            log.write(("request failed: %r\n" % (exc,)).encode())
        finally:
            try:
                conn.close()
            except OSError:
                pass
            try:
                os.unlink(busy)
            except OSError:
                pass


def handle(kernel: Kernel, conn: socket.socket, log: Log) -> None:
    try:
        req = read_request(conn)
    except (ValueError, OSError) as exc:
        log.write(("bad request: %s\n" % exc).encode())
        return
    if req is None:
        return
    if client_gone(conn):
        # The client gave up while another cell held the kernel: do not run its request late.
        log.write(b"client left before its request started\n")
        return
    channel = Channel(
        conn, int(req.get("max_output") or 1024 * 1024), req.get("budget"), req.get("job")
    )
    final: Optional[Frame] = None
    try:
        op = req.get("op")
        if op == "execute":
            final = kernel.execute(req, channel, conn)
        elif op == "install":
            final = kernel.install(req, channel)
        else:
            final = kernel.ping(channel)
    except BaseException as exc:
        # A failure of the daemon itself, not of the cell: say what it was; the daemon lives on.
        text = traceback.format_exc()
        log.write(("request failed: %s\n" % text).encode())
        final = {
            "t": "end",
            "kernel": KERNEL_ID,
            "n": STATE.count,
            "error": {"name": "KernelError", "message": repr(exc), "traceback": text},
            "timed_out": False,
            "client_gone": False,
            "dropped": [channel.dropped["stdout"], channel.dropped["stderr"]],
            "ms": 0,
        }
    finally:
        STATE.executing = False
        kernel.router.channel = None
        kernel.channel = None
        assert final is not None
        if final.get("error"):
            for frame in error_frames(final["error"]):
                channel.frame(frame)
        channel.finish(final)


def main() -> None:
    directory = sys.argv[1]
    log = Log(os.dup(2))
    os.chdir(sys.argv[2] if len(sys.argv) > 2 and sys.argv[2] else os.getcwd())
    # Modules in the working directory import, as in IPython.
    sys.path[0] = ""
    os.environ.setdefault("MPLBACKEND", "Agg")
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    warnings.filterwarnings("ignore", message="FigureCanvasAgg is non-interactive")
    warnings.filterwarnings("ignore", message="Matplotlib is currently using agg")
    try:
        import faulthandler

        faulthandler.enable(file=log.fd, all_threads=False)
    except (ImportError, OSError, ValueError):
        pass
    router = Router(log)
    capture = FdCapture(router)
    kernel = Kernel(router, capture, log)
    kernel.reset_streams()
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=router.after_fork_in_child)
    signal.signal(signal.SIGINT, on_sigint)
    path = os.path.join(directory, "sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    tmp = path + ".%d" % os.getpid()
    try:
        os.unlink(tmp)
    except OSError:
        pass
    old_umask = os.umask(0o177)
    dir_fd = None
    address = tmp
    if len(tmp.encode()) > 100:
        # A Unix socket address holds 108 bytes; the directory's descriptor gives the same
        # file a short name (the client connects the same way).
        dir_fd = os.open(directory, os.O_RDONLY)
        address = "/proc/self/fd/%d/%s" % (dir_fd, os.path.basename(tmp))
    try:
        listener.bind(address)
    finally:
        os.umask(old_umask)
        if dir_fd is not None:
            os.close(dir_fd)
    listener.listen(16)
    # Renamed into place only once listening, so a client that finds the path can connect.
    os.rename(tmp, path)
    log.write(
        (
            "kernel %s listening, pid %d, python %s\n"
            % (KERNEL_ID, os.getpid(), sys.version.split()[0])
        ).encode()
    )
    serve(kernel, listener, log, directory)


if __name__ == "__main__":
    sys.modules["lizard_kernel_daemon"] = sys.modules[__name__]
    main()
