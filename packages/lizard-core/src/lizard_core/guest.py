"""The host side of the guest protocol: one streaming exec per operation, read as frames.

A guest program (standard-library Python in :mod:`lizard_core._guest`) runs as
``python3 -I -S -c <program> <call id> <k> <request part>...`` through a streaming exec; its
stdout is a framed channel (kinds and keys in :mod:`lizard_core._wire`). What holds for every
program run through :func:`run_guest` (commands, files, the kernel client):

- **Frames.** Each stdout line is one JSON object with a type ``t``: first ``pid``, then any
  frames for the caller's ``on_frame`` in order, ``hb`` heartbeats every :data:`HEARTBEAT_S` of
  silence, and exactly one ``end`` with the outcome. Lines the platform split are rejoined.
- **Bounds.** The guest runs untrusted code, so only checked frames are believed: a ``pid`` or
  ``pg`` must be a pid, one ``pid`` and one ``end`` count, a line is held up to 1 MiB, and only a
  few malformed lines and process groups are kept. The rest is ``on_frame``'s to check.
- **Proof of completion.** Only the ``end`` frame proves the guest finished; a stream without it
  or with malformed lines raises :class:`~lizard_core.errors.GuestProtocolError` (and kills a
  guest that started), never a short success. A guest that never spoke raises
  :class:`~lizard_core.errors.GuestNotStartedError`: nothing of the request ran.
- **A sandbox gone under the call.** A broken stream or failed transport is checked with one
  ``GET`` of the sandbox: if it no longer exists, :class:`~lizard_core.errors.SandboxGoneError`
  (recorded on the ``session=``), else the original error. The happy path pays nothing.
- **Host-side deadline.** No frame for :data:`STALL_S`, or past ``deadline_s``, means the guest
  is killed and :class:`~lizard_core.errors.GuestProtocolError` raised; a stuck guest cannot
  hang the host.
- **Cancellation.** :class:`Cancellation`, or any exception in the waiting thread, stops the
  guest: ``SIGTERM`` by a second exec, ``SIGKILL`` to it and its process groups after
  :data:`CANCEL_GRACE_S`. The call returns only once the stream ended or the grace ran out.
- **Requests.** JSON, base64, in argv items of at most :data:`ARG_PART` characters, plus the job
  directories earlier calls left for cleanup, so cleanup costs no request of its own.
- **Credentials.** Only the program, the call id and the request go into argv; never the API key.
- **Connections.** With ``session=``, calls reuse the session's kept-alive client
  (:mod:`lizard_core._transport`); without it, the SDK's ``sandbox.process.exec_``.
- **Cost.** One exec per call; stopping a guest costs one more; a broken stream one ``GET``.
"""

from __future__ import annotations

import base64
import functools
import json
import logging
import queue
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, TypeVar

from lizard_core._bridge import Cancellation, arun_cancellable, loop_callback
from lizard_core._guest import program
from lizard_core._guest_lines import LineReader
from lizard_core._guest_relay import guest_argv
from lizard_core._guest_stop import CANCEL_GRACE_S, GuestProcesses, GuestStopper
from lizard_core._guest_wait import WaitLimits
from lizard_core._jobs import (
    JOBS_ROOT,
    forget_cleanup,
    is_job_file,
    return_cleanup,
    schedule_cleanup,
    take_cleanup,
)
from lizard_core._lines import LineTooLongError
from lizard_core._spill import fetch_file
from lizard_core._wire import AgentEnd, AgentFrame, GuestFrame
from lizard_core.errors import (
    GuestCancelledError,
    GuestNotStartedError,
    GuestProtocolError,
    LizardIntegrationError,
    SandboxGoneError,
    TransientError,
    translated,
)
from lizard_core.session import Session, confirm_alive

__all__ = [
    "ARG_PART",
    "CANCEL_GRACE_S",
    "HEARTBEAT_S",
    "JOBS_ROOT",
    "STALL_S",
    "Cancellation",
    "Frame",
    "GuestCancelledError",
    "GuestNotStartedError",
    "arun_cancellable",
    "check_outcome",
    "encode_args",
    "fetch_file",
    "is_job_file",
    "loop_callback",
    "run_guest",
    "schedule_cleanup",
]

T = TypeVar("T")
Frame = dict[str, Any]
"""One decoded frame: a JSON object with a type ``t``."""

_log = logging.getLogger(__name__)

HEARTBEAT_S: Final = 2.5
"""A silent guest sends a heartbeat frame this often."""
STALL_S: Final = 15.0
"""No frame at all for this long means the guest is dead or stuck."""
SIGNAL_TIMEOUT_S: Final = 10.0
"""Deadline for the second exec that signals a guest."""
ARG_PART: Final = 96 * 1024
"""Base64 characters per argv item (a multiple of 4; the kernel allows 128 KiB per argument)."""
_STDERR_TAIL: Final = 20
_MAX_NOISE: Final = 8


# ── encoding ─────────────────────────────────────────────────────────────


def encode_args(data: bytes, part: int = ARG_PART) -> list[str]:
    """Base64 ``data`` as argv items of at most ``part`` characters, each decodable alone."""
    raw = part // 4 * 3
    return [base64.b64encode(data[i : i + raw]).decode("ascii") for i in range(0, len(data), raw)]


def _request_args(request: Mapping[str, Any]) -> list[str]:
    text = base64.b64encode(json.dumps(request, separators=(",", ":")).encode()).decode("ascii")
    return [text[i : i + ARG_PART] for i in range(0, len(text), ARG_PART)] or [""]


# ── the call ─────────────────────────────────────────────────────────────


class _GuestCall:
    """One run of a guest program: a streaming exec read in a thread, waited for here."""

    def __init__(
        self,
        sandbox: Any,
        program_text: str,
        request: Mapping[str, Any],
        *,
        data_args: Sequence[str],
        on_frame: Callable[[Frame], None] | None,
        exec_timeout_s: float,
        deadline_s: float | None,
        stall_s: float,
        cancel: Cancellation | None,
        session: Session | None = None,
        may_signal: bool = True,
    ) -> None:
        self.sandbox = sandbox
        self.session = session
        # False for the signalling exec itself, which must never spawn further requests
        # (signalling execs, liveness checks) of its own.
        self.may_signal = may_signal
        self.sandbox_id = str(sandbox.sandbox_id)
        self.call_id = uuid.uuid4().hex[:16]
        self.cleanup = take_cleanup(self.sandbox_id)
        body = dict(request)
        body.setdefault(GuestFrame.HEARTBEAT_EVERY, HEARTBEAT_S)
        if self.cleanup:
            body[GuestFrame.CLEANUP] = self.cleanup
        parts = _request_args(body)
        self.argv = guest_argv(program_text, [self.call_id, str(len(parts)), *parts, *data_args])
        self.on_frame = on_frame
        self.exec_timeout_ms = max(1000, int(exec_timeout_s * 1000))
        self.deadline_s = deadline_s
        self.stall_s = stall_s
        self.cancel = cancel
        self.events: queue.Queue[tuple[str, Any]] = queue.Queue()
        self.processes = GuestProcesses()
        self.stderr_tail: list[str] = []
        self.noise: list[str] = []
        self.frames_seen = 0
        self.final: Frame | None = None
        self.finished = False  # the exec call returned or raised
        self.stopping = False
        # Set when the stream broke or its transport failed (not for a cancellation or an
        # on_frame error): the sandbox itself may be gone, which one GET decides.
        self.broken = False
        # Set when the stream is gone while the guest may still run: it is killed unless the
        # sandbox turns out to be gone.
        self.unobserved = False
        # Cuts the stream off (set by the session's transport once the response started).
        self.abort_stream: Callable[[], None] | None = None
        self.stopper = GuestStopper(
            sandbox, self.call_id, self.processes, self._drain_until, self._signal
        )

    # runs in the stream thread
    def _stream(self) -> None:
        reader = LineReader(lambda kind, value: self.events.put((kind, value)))
        try:
            with translated(sandbox_id=self.sandbox_id):
                # With a session, its pooled connection; without one, the SDK's own call.
                exec_ = (
                    self.sandbox.process.exec_
                    if self.session is None
                    else functools.partial(
                        self.session.transport().exec_stream,
                        self.sandbox_id,
                        on_abortable=functools.partial(setattr, self, "abort_stream"),
                        collect=False,
                    )
                )
                result = exec_(
                    self.argv,
                    timeout_ms=self.exec_timeout_ms,
                    on_stdout=reader.feed,
                    on_stderr=lambda line: self.events.put(("stderr", line)),
                    on_pid=lambda pid: self.events.put(("exec_pid", pid)),
                )
            reader.close()
            self.events.put(("done", result.exit_code))
        except BaseException as exc:
            reader.close()
            self.events.put(("error", exc))

    def run(self) -> Frame:
        try:
            if self.session is None or not self.may_signal:
                return self._run()
            with self.session.in_use():  # keep-alive extends the lifetime while this runs
                return self._run()
        finally:
            # A stream still open now (stalled, or lingering past its end frame) is cut off,
            # so that its thread ends now rather than at the exec's own timeout.
            abort = self.abort_stream
            if abort is not None and not self.finished:
                abort()

    def _run(self) -> Frame:
        thread = threading.Thread(target=self._stream, name="lizard-core-guest", daemon=True)
        thread.start()
        if self.cancel is not None:
            self.cancel.listen(lambda: self.events.put(("cancel", None)))
        try:
            return self._wait()
        except (GuestProtocolError, GuestCancelledError) as error:
            self._raise_if_gone(error)
            if self.unobserved:
                self._kill_unobserved()
            elif not self.finished:
                self._stop(graceful=False)
            raise
        except BaseException as error:
            self._raise_if_gone(error)
            # KeyboardInterrupt, or a callback that raised: stop the command as a cancel would.
            if not self.finished:
                self._stop(graceful=True)
            if self.processes.guest_pid is None and not self.frames_seen:
                return_cleanup(self.sandbox_id, self.cleanup)
            raise

    def _raise_if_gone(self, error: BaseException) -> None:
        """After a broken stream, raise SandboxGoneError if the sandbox no longer exists.

        One GET; if it cannot tell (the check failed too), the original error stands.
        """
        if not self.broken or not self.may_signal:
            return
        try:
            if self.session is not None:
                self.session.check_alive()
            else:
                confirm_alive(self.sandbox)
        except SandboxGoneError as gone:
            forget_cleanup(self.sandbox_id)
            raise gone from error
        except LizardIntegrationError as check:
            _log.debug("could not check sandbox %s after %r: %r", self.sandbox_id, error, check)

    def _wait(self) -> Frame:
        limits = WaitLimits(self.stall_s, self.deadline_s)
        while True:
            try:
                kind, value = self.events.get(timeout=limits.remaining())
            except queue.Empty:
                why = limits.over()
                if why == "lingering":
                    return self._outcome()  # the end frame arrived; the stream lingers
                self.broken = True
                if why == "stalled":
                    raise GuestProtocolError(
                        f"The guest program stopped answering (no frame for {self.stall_s:g} s)"
                        f"{self._context()}."
                    ) from None
                raise GuestProtocolError(
                    f"The guest program did not finish within {self.deadline_s:g} s"
                    f"{self._context()}."
                ) from None
            if kind == "frame":
                limits.heard()
                self._frame(value)
                if self.final is not None:
                    limits.ended()
            elif kind == "stderr":
                # Only the end of the tail is ever shown: lines are kept short.
                self.stderr_tail = [*self.stderr_tail[-(_STDERR_TAIL - 1) :], value[-500:]]
            elif kind == "noise":
                self._noise(value[:200])
            elif kind == "exec_pid":
                self.processes.exec_pid = int(value)
            elif kind == "cancel":
                self._stop(graceful=True)
                raise GuestCancelledError("The guest call was cancelled; the guest was stopped.")
            elif kind == "done":
                self.finished = True
                return self._outcome(exit_code=value)
            elif kind == "error":
                self.finished = True
                return self._stream_failed(value)

    def _stream_failed(self, error: BaseException) -> Frame:
        """The exec raised: the proven outcome if there is one, else the error to raise."""
        if self.final is not None and not self.noise:
            return self.final  # the outcome is proven; a late transport error is moot
        started = self.frames_seen or self.processes.exec_pid is not None
        self.broken = isinstance(error, TransientError)
        if started and isinstance(error, LineTooLongError):
            self.unobserved = True  # the stream was abandoned; the guest may run on
        if started and isinstance(error, TransientError):
            # The guest ran and may still be running, unobserved: stop it (unless the
            # sandbox is gone), and say that the operation may have run rather than
            # that the API was unreachable.
            self.unobserved = True
            raise GuestProtocolError(
                "The exec stream broke before the guest program's final frame, so the "
                f"operation may have partly run ({error.message}){self._context()}."
            ) from error
        raise error

    def _frame(self, frame: Frame) -> None:
        self.frames_seen += 1
        kind = frame[GuestFrame.TYPE]
        if kind == GuestFrame.HEARTBEAT:
            return
        if kind == GuestFrame.PID:
            if not self.processes.note_pid(frame.get(GuestFrame.PID)):
                self._noise("a malformed or second pid frame")
            return
        if kind == GuestFrame.END:
            if self.final is None:
                self.final = frame
            else:
                self._noise("a second end frame")
            return
        if self.final is not None:
            self._noise(f"a {kind[:16]!r} frame after the end frame")
            return
        self.processes.note_group(frame.get(AgentFrame.PROCESS_GROUP))
        if self.on_frame is not None:
            self.on_frame(frame)

    def _noise(self, what: str) -> None:
        # Only the first is reported; a flood of them must not grow without bound.
        if len(self.noise) < _MAX_NOISE:
            self.noise.append(what)

    def _outcome(self, exit_code: int | None = None) -> Frame:
        # Whatever is raised from here is a stream that broke (see _raise_if_gone).
        self.broken = True
        if self.noise:
            raise GuestProtocolError(
                f"The guest program sent malformed output ({self.noise[0]!r}){self._context()}."
            )
        if self.final is None:
            why = "" if exit_code is None else f"; the exec exited with code {exit_code}"
            if not self.frames_seen:
                raise GuestNotStartedError(
                    f"The guest program did not start, so nothing of the request ran{why}"
                    f"{self._context()}."
                )
            raise GuestProtocolError(
                "The guest program's output ended without its final frame, so the result "
                f"cannot be trusted{why}{self._context()}."
            )
        self.broken = False
        return self.final

    def _context(self) -> str:
        tail = "\n".join(self.stderr_tail).strip()
        return f" (guest stderr: {tail[-500:]})" if tail else ""

    # ── stopping (when and what to signal: lizard_core._guest_stop) ─────

    def _stop(self, *, graceful: bool) -> None:
        """Stop the guest (asked first when ``graceful``); wait for the stream within the graces.

        A broken guest (stalled, past its deadline) is killed outright: asking is pointless.
        """
        if self.stopping or not self.may_signal:
            return
        self.stopping = True
        try:
            self.stopper.stop(graceful=graceful)
        except Exception:  # best effort: the caller's own error or cancellation wins
            _log.warning("could not stop guest call %s", self.call_id, exc_info=True)

    def _kill_unobserved(self) -> None:
        """Kill a guest whose stream is gone (best effort; its outcome is already lost)."""
        if not self.may_signal:
            return
        try:
            self.stopper.kill_unobserved()
        except Exception:  # often already gone: platforms end an exec whose client left
            _log.debug("could not stop guest call %s", self.call_id, exc_info=True)

    def _drain_until(self, condition: Callable[[], bool], seconds: float) -> bool:
        """Consume events until ``condition()`` holds (True) or the stream ended (False)."""
        end = time.monotonic() + seconds
        while not self.finished and not condition():
            remaining = end - time.monotonic()
            if remaining <= 0:
                return True
            try:
                kind, value = self.events.get(timeout=remaining)
            except queue.Empty:
                return True
            if kind == "frame":
                if not (
                    value.get(GuestFrame.TYPE) == GuestFrame.PID
                    and self.processes.note_pid(value.get(GuestFrame.PID))
                ):
                    self.processes.note_group(value.get(AgentFrame.PROCESS_GROUP))
                self.frames_seen += 1
            elif kind == "exec_pid":
                self.processes.exec_pid = int(value)
            elif kind in ("done", "error"):
                self.finished = True
        return not self.finished

    def _signal(self, request: Mapping[str, Any]) -> None:
        """Run the agent's ``signal`` request as a guest call of its own, which never signals."""
        _GuestCall(
            self.sandbox,
            program("agent"),
            request,
            data_args=(),
            on_frame=None,
            exec_timeout_s=SIGNAL_TIMEOUT_S,
            deadline_s=SIGNAL_TIMEOUT_S,
            stall_s=SIGNAL_TIMEOUT_S,
            cancel=None,
            may_signal=False,
        ).run()


def run_guest(
    sandbox: Any,
    request: Mapping[str, Any],
    *,
    on_frame: Callable[[Frame], None] | None = None,
    data_args: Sequence[str] = (),
    exec_timeout_s: float = 600.0,
    deadline_s: float | None = None,
    stall_s: float = STALL_S,
    cancel: Cancellation | None = None,
    program_name: str = "agent",
    session: Session | None = None,
) -> Frame:
    """Run one guest program with ``request`` on ``sandbox`` (a ``lizard.Sandbox``); blocking.

    Frames other than ``pid``, ``hb`` and ``end`` go to ``on_frame`` in the calling thread, in
    order. Returns the ``end`` frame. ``exec_timeout_s`` is the platform's limit for the exec
    (and httpx's idle-read limit, which heartbeats keep from firing); ``deadline_s`` is the
    host-side limit for the whole call (None: only the stall limit applies). ``data_args`` are
    extra argv items (see :func:`encode_args`). Raises
    :class:`~lizard_core.errors.GuestProtocolError` when the end frame is missing or the guest
    stalls, the translated SDK error when the exec itself fails, and
    :class:`GuestCancelledError` once ``cancel`` was set; it stops the guest before raising
    anything, and before re-raising an exception from ``on_frame`` or a ``KeyboardInterrupt``.
    When the stream breaks or the exec's transport fails, one ``GET`` of the sandbox record
    turns the error into :class:`~lizard_core.errors.SandboxGoneError` if the sandbox no longer
    exists; pass the ``session`` the sandbox belongs to so that it records that too.
    """
    call = _GuestCall(
        sandbox,
        program(program_name),
        request,
        data_args=data_args,
        on_frame=on_frame,
        exec_timeout_s=exec_timeout_s,
        deadline_s=deadline_s,
        stall_s=stall_s,
        cancel=cancel,
        session=session,
    )
    return call.run()


def check_outcome(final: Frame) -> Frame:
    """Raise what an ``end`` frame reports as failed, else return it.

    ``err`` becomes the builtin ``OSError`` subclass for its errno (``OSError(errno, ...)``
    picks it: FileNotFoundError, IsADirectoryError, ...); ``bug`` a GuestProtocolError.
    """
    err = final.get(AgentEnd.ERRNO)
    if err is not None:
        if not (
            isinstance(err, list)
            and len(err) == 3
            and (err[0] is None or (isinstance(err[0], int) and not isinstance(err[0], bool)))
            and all(part is None or isinstance(part, str) for part in err[1:])
        ):
            raise GuestProtocolError("The guest program sent a malformed error.")
        number, message, filename = err
        raise OSError(number, message, filename)
    bug = final.get(AgentEnd.BUG)
    if bug is not None:
        raise GuestProtocolError(f"The guest program failed: {str(bug)[:2000]}")
    return final
