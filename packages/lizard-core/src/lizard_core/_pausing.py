"""Pause and resume (mixed into :class:`~lizard_core.session.Session`), explicit or when idle.

The platform's pause keeps files only (lizard-sdk 1.0.23): processes end, compute billing
stops, the lifetime is frozen, and a resume boots the sandbox fresh on its files; the caller
polls the status. Contract:

- :meth:`Pausing.pause` / :meth:`Pausing.resume` are one ``POST`` each, then a bounded wait for
  the status (``GET``s, quick at first, at most a second apart, for at most the session's
  ``state_wait_s``); past it, :class:`~lizard_core.errors.StateWaitTimeoutError`. A sandbox
  that is gone (404, a terminal status) is :class:`~lizard_core.errors.SandboxGoneError`; a
  failed pause the platform reports is :class:`~lizard_core.errors.SandboxStateError`. Both
  are idempotent: pausing a paused session or resuming a running one makes no request. A wait
  cut short (Ctrl-C, a cancellation, the timeout) leaves the session consistent: once a pause
  is sent the session counts its sandbox paused, and the next operation waits for that pause
  to end and resumes; a resume already sent is awaited, not sent again.
- **Transparent resume.** The next operation on a session paused by this session resumes it
  first (:meth:`Session.sandbox`); callers never see a 409 for a pause of their own.
- **Idle pause** (``idle_pause_s``): a thread pauses the sandbox once no operation has been in
  flight for that long. Use counts from an operation's start to its end (guest calls: commands,
  kernel cells, file operations through the guest, SDK calls through ``Session.call`` such as
  a snapshot or a fork) and at each request's start otherwise. A
  failed idle pause is logged and tried again after another idle period, never raised. The
  thread holds the session only weakly while it waits: a session dropped without a close is
  still collected, and its thread ends within ``idle_pause_s`` of that (or :data:`IDLE_CHECK_S`
  when shorter).
- **Fresh boots are counted** (:attr:`Pausing.boot_epoch`, with :attr:`Pausing.boot_notice`
  saying why in words fit for a model): a resume, an attach that had to resume, a start from a
  snapshot or a fork. A :class:`~lizard_core.kernel.Kernel` reads them to report its state as
  lost, and only when its kernel really is a fresh one: where the platform keeps memory across
  a pause, the kernel carries on and nothing is reported.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from datetime import UTC, datetime
from typing import Any, Final

from lizard import Sandbox

from lizard_core._bridge import run_blocking
from lizard_core._keep_alive import live_session
from lizard_core._liveness import GONE_STATUSES
from lizard_core.config import SandboxConfig
from lizard_core.errors import (
    MALFORMED_ANSWER,
    LizardIntegrationError,
    SandboxGoneError,
    SandboxStateError,
    StateWaitTimeoutError,
    malformed_answer,
    translated,
)

__all__ = ["DEFAULT_STATE_WAIT_S", "IDLE_CHECK_S", "RESTORED_NOTICE", "RESUMED_NOTICE", "Pausing"]

_log = logging.getLogger("lizard_core.session")

DEFAULT_STATE_WAIT_S: Final = 120.0
"""How long a pause or resume may take to reach its status before the wait gives up."""
RESUMED_NOTICE: Final = (
    "The sandbox was paused and has been resumed: it booted fresh with its files, so the "
    "Python kernel's variables, imports and functions are lost (files are kept)."
)
RESTORED_NOTICE: Final = (
    "This sandbox started from a snapshot, which holds files only: the Python kernel starts "
    "empty (variables, imports and functions from before the snapshot are lost; files are kept)."
)
IDLE_CHECK_S: Final = 30.0
"""Longest wait (seconds) of the idle-pause thread between looks at whether its session was
dropped without a close."""
_NO_DEADLINE: Final = float("inf")
_FIRST_POLL_S: Final = 0.05
_MAX_POLL_S: Final = 1.0


class Pausing:
    """The pause half of a session; the state it reads is the session's own."""

    _lock: threading.Lock
    _keeper_wake: threading.Condition
    _closed: bool
    _sandbox: Any
    _sandbox_id: str | None
    _in_flight: int
    _idle_pause_s: float | None
    _state_wait_s: float
    _state_lock: threading.RLock
    _paused: bool
    # The status a transition already sent still waits for ("paused", "running"), or None.
    _pending: str | None
    _boot_epoch: int
    _boot_notice: str | None
    _last_used: float
    _idler: threading.Thread | None
    _gone: bool

    _keep_alive: bool
    _extend_due: float | None
    _config: SandboxConfig

    _acquiring: Any

    def api_kwargs(self) -> dict[str, str]:
        raise NotImplementedError

    def _check_usable(self) -> None:
        raise NotImplementedError

    def _extend(self, sandbox: Any) -> None:
        raise NotImplementedError

    def _acquired(self) -> Any:
        """The ``lizard.Sandbox``, created or attached, not resumed (the session's own)."""
        raise NotImplementedError

    def _call_with_retries(self, fn: Any, /, *args: Any, idempotent: bool, **kwargs: Any) -> Any:
        raise NotImplementedError

    # ── public ───────────────────────────────────────────────────────────

    @property
    def paused(self) -> bool:
        """True while this session holds its sandbox paused (no request is made)."""
        with self._lock:
            return self._paused

    @property
    def boot_epoch(self) -> int:
        """How many fresh boots of its sandbox this session caused or found (0: none)."""
        with self._lock:
            return self._boot_epoch

    @property
    def boot_notice(self) -> str | None:
        """Why the sandbox last booted fresh, in words fit for a model; None if it never did."""
        with self._lock:
            return self._boot_notice

    @property
    def idle_pause_s(self) -> float | None:
        """Idle seconds after which the sandbox is paused, or None (never)."""
        return self._idle_pause_s

    def pause(self) -> None:
        """Pause the sandbox: processes end, files stay, billing for compute stops (blocking).

        A session with no sandbox yet makes no request; one that is to attach to a sandbox
        already paused makes one ``GET`` and leaves it paused. Operations in flight end with
        their processes. The next operation resumes the sandbox; :meth:`close` leaves it paused for
        another run to attach to.
        """
        with self._lock:
            if self._sandbox is None and self._sandbox_id is None:
                return
            self._check_usable()
            # An attach not yet made: a sandbox already paused is left so, not booted to be
            # paused again (one GET instead of a resume and a pause).
            attach_id = None if self._sandbox is not None or self._acquiring else self._sandbox_id
        if attach_id is not None and self._found_paused(attach_id):
            return
        self._pause_now(self._acquired(), idle=False)

    def _found_paused(self, attach_id: str) -> bool:
        """One GET: whether the sandbox to attach to is paused (or pausing, then awaited)."""
        sandbox = Sandbox(attach_id, **self.api_kwargs())
        try:
            with translated(sandbox_id=attach_id):
                try:
                    info = self._call_with_retries(sandbox.get_info, idempotent=True)
                except MALFORMED_ANSWER as exc:
                    raise malformed_answer("sandbox lookup", exc) from exc
        except SandboxGoneError:
            with self._lock:
                self._gone = True
            raise
        status = getattr(info, "status", None)
        if status == "pausing":
            self._wait_status(sandbox, "paused")
        return status in ("paused", "pausing")

    async def apause(self) -> None:
        """Async :meth:`pause`; a cancellation waits for the request already sent."""
        await run_blocking(self.pause)

    def resume(self) -> None:
        """Resume the sandbox if this session paused it (blocking); it boots fresh."""
        self._resume_now(self._acquired())

    async def aresume(self) -> None:
        """Async :meth:`resume`."""
        await run_blocking(self.resume)

    # ── attach ───────────────────────────────────────────────────────────

    def _attach(self, attach_id: str) -> Any:
        """One ``GET`` for the status; a resume if paused; a renewal if the lifetime is short.

        The lifetime is renewed to the configuration's (one ``set_timeout``) when less than
        half of that is left (keep-alive's own threshold), read after a resume (a paused
        sandbox's lifetime is frozen); a longer one is never shortened, and a sandbox without
        a deadline is left without one, paused or not.
        """
        sandbox = Sandbox(attach_id, **self.api_kwargs())
        try:
            with translated(sandbox_id=attach_id):
                try:
                    info = self._call_with_retries(sandbox.get_info, idempotent=True)
                except MALFORMED_ANSWER as exc:
                    raise malformed_answer("sandbox lookup", exc) from exc
            status = getattr(info, "status", None)
            if isinstance(status, str) and status.lower() in GONE_STATUSES:
                raise SandboxGoneError(
                    f"The sandbox {attach_id} no longer exists (its status is {status!r}).",
                    sandbox_id=attach_id,
                )
            if status in ("paused", "pausing"):
                if status == "pausing":
                    self._wait_status(sandbox, "paused")
                with self._lock:
                    self._paused = True
                info = self._resume_now(sandbox)
            elif status == "resuming":
                info = self._wait_status(sandbox, "running")
                self._booted_fresh(RESUMED_NOTICE)
            # Frozen while paused: what is left is read once it runs again (the running
            # answer), so that a longer lifetime is not cut to the configuration's.
            left_s = _seconds_left(info) if info is not None else 0.0
            started = time.monotonic()
            lifetime_s = self._config.lifetime_ms / 1000
            if left_s != _NO_DEADLINE and left_s < lifetime_s / 2:
                self._extend(sandbox)  # a later run's sandbox must not expire under it
                left_s = lifetime_s
        except SandboxGoneError:
            with self._lock:
                self._gone = True
            raise
        with self._lock:
            self._sandbox = sandbox
            if self._keep_alive and left_s != _NO_DEADLINE:
                # Keep-alive's own rule, as after an extension: at least half a lifetime is
                # left at every use (extended at first use once less is left), never shortened.
                self._extend_due = started + max(left_s - lifetime_s / 2, 0.0)
        _log.debug("attached to sandbox %s", attach_id)
        return sandbox

    # ── transitions ──────────────────────────────────────────────────────

    def _pause_now(self, sandbox: Any, *, idle: bool) -> None:
        with self._state_lock:
            with self._lock:
                if self._paused:
                    return
                if idle and (
                    self._in_flight
                    or time.monotonic() - self._last_used < (self._idle_pause_s or 0.0)
                ):
                    return  # used again meanwhile
            self._post_transition(sandbox, "pause")
            with self._lock:
                # Paused from here on, whatever the wait: an interrupted one must still leave
                # the next operation resuming, not failing on a paused sandbox.
                self._paused = True
                self._pending = "paused"
            try:
                self._wait_status(sandbox, "paused")
            except SandboxStateError:
                with self._lock:  # the platform says the pause failed: still running
                    self._paused = False
                    self._pending = None
                raise
            with self._lock:
                self._pending = None
        _log.debug("paused sandbox %s%s", sandbox.sandbox_id, " (idle)" if idle else "")

    def _resume_now(self, sandbox: Any) -> Any:
        """Resume if paused; the running sandbox's info, or None if nothing was done."""
        with self._state_lock:
            with self._lock:
                if not self._paused:
                    return None
                pending = self._pending
            if pending == "paused":  # a pause whose wait was cut short: let it end first
                self._wait_status(sandbox, "paused")
            if pending != "running":  # a resume already sent is awaited, not sent again
                self._post_transition(sandbox, "resume")
                with self._lock:
                    self._pending = "running"
            info = self._wait_status(sandbox, "running")
            with self._lock:
                self._paused = False
                self._pending = None
                self._last_used = time.monotonic()
            self._booted_fresh(RESUMED_NOTICE)
        _log.debug("resumed sandbox %s", sandbox.sandbox_id)
        return info

    def _booted_fresh(self, notice: str) -> None:
        with self._lock:
            self._boot_epoch += 1
            self._boot_notice = notice

    def _post_transition(self, sandbox: Any, action: str) -> None:
        # The SDK answers False for a 404: the sandbox is gone.
        if not self._call_with_retries(getattr(sandbox, action), idempotent=True):
            with self._lock:
                self._gone = True
            raise SandboxGoneError(
                f"The sandbox {sandbox.sandbox_id} no longer exists (killed or expired).",
                sandbox_id=str(sandbox.sandbox_id),
            )

    def _wait_status(self, sandbox: Any, want: str) -> Any:
        """Poll until the sandbox's status is ``want`` (bounded by ``state_wait_s``); its info."""
        sandbox_id = str(sandbox.sandbox_id)
        deadline = time.monotonic() + self._state_wait_s
        delay = _FIRST_POLL_S
        while True:
            with translated(sandbox_id=sandbox_id):
                try:
                    info = self._call_with_retries(sandbox.get_info, idempotent=True)
                except MALFORMED_ANSWER as exc:
                    raise malformed_answer("sandbox lookup", exc) from exc
            status = getattr(info, "status", None)
            if status == want:
                return info
            if isinstance(status, str) and status.lower() in GONE_STATUSES:
                with self._lock:
                    self._gone = True
                raise SandboxGoneError(
                    f"The sandbox {sandbox_id} no longer exists (its status is {status!r}).",
                    sandbox_id=sandbox_id,
                )
            pause_error = getattr(info, "pause_error", None)
            if pause_error:
                action = "pause" if want == "paused" else "resume"
                raise SandboxStateError(
                    f"The sandbox {sandbox_id} could not {action}: {str(pause_error)[:300]}"
                )
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise StateWaitTimeoutError(
                    f"The sandbox {sandbox_id} did not become {want} within "
                    f"{self._state_wait_s:g} s (its status is {status!r})."
                )
            time.sleep(min(delay, remaining))
            delay = min(delay * 2, _MAX_POLL_S)

    def _ensure_running(self, sandbox: Any) -> None:
        """Before an operation: resume a sandbox this session paused, and count the use."""
        if self._idle_pause_s is None and not self._paused:
            return
        with self._state_lock:  # a pause in progress finishes first; the use is then seen
            self._resume_now(sandbox)  # nothing unless paused
            with self._lock:
                self._last_used = time.monotonic()
                self._start_idler()

    # ── idle pause ───────────────────────────────────────────────────────

    def _start_idler(self) -> None:
        """Start the idle-pause thread if it is wanted and not running (lock held)."""
        if self._idle_pause_s is None or self._idler is not None or self._closed:
            return
        self._idler = threading.Thread(
            target=_pause_when_idle,
            args=(weakref.ref(self), self._keeper_wake, self._idle_pause_s),
            name="lizard-core-idle-pause",
            daemon=True,
        )
        self._idler.start()


def _pause_when_idle(ref: weakref.ref[Pausing], wake: threading.Condition, idle: float) -> None:
    """The idle-pause thread: pauses the session's sandbox once idle for ``idle`` seconds.

    It holds the session weakly while it waits (``wake`` is the session's condition on its
    lock), so that a session dropped without a close is still collected; it then ends.
    """
    while True:
        with wake:
            while True:
                session = live_session(ref, "_idler")
                if session is None:
                    return
                due = session._last_used + idle
                now = time.monotonic()
                ready = (
                    session._sandbox is not None and not session._paused and not session._in_flight
                )
                if ready and now >= due:
                    sandbox = session._sandbox
                    break
                del session
                wake.wait(min(max(due - now, 0.05) if ready else idle, IDLE_CHECK_S))
        try:
            session._pause_now(sandbox, idle=True)
        except LizardIntegrationError as error:
            _log.warning("idle pause of sandbox %s failed: %s", session._sandbox_id, error)
            with wake:
                session._last_used = time.monotonic()
        del session, sandbox


def _seconds_left(info: Any) -> float:
    """Seconds until the sandbox's deadline: ``inf`` without one, 0 when unreadable."""
    end = getattr(info, "end_at", None)
    if not end:
        return _NO_DEADLINE  # timeoutMs 0: no deadline, and none is added
    try:
        deadline = datetime.fromisoformat(str(end).replace("Z", "+00:00"))
    except ValueError:
        return 0.0  # unknown: renew rather than risk an expiry
    if deadline.tzinfo is None:
        deadline = deadline.replace(tzinfo=UTC)
    return max((deadline - datetime.now(UTC)).total_seconds(), 0.0)
