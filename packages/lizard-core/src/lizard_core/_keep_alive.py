"""Keep-alive: a sandbox in use does not expire; an idle one still does.

Contract (the behaviour is :class:`~lizard_core.session.Session`'s, which mixes this in):

- Off unless the session was made with ``keep_alive=True``.
- A use that comes more than half a lifetime after the deadline was last set calls
  ``set_timeout(lifetime_ms)`` first: at most one request per half lifetime, never one per
  operation, and only one caller sends it.
- While an operation is in flight (:meth:`KeepAlive.in_use`), the lifetime is extended every
  half lifetime as well, by the session's one keeper thread: started at its first operation,
  asleep while none is in flight (an operation costs no thread), ended when the session closes
  or its sandbox is found gone, or within :data:`IDLE_CHECK_S` of the session being dropped
  unclosed (the thread holds it only weakly).
- Best effort: a failed extension is logged and tried again after :data:`RETRY_S`, never raised.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import weakref
from collections.abc import Iterator
from typing import Any, Final, Protocol, TypeVar

from lizard_core.config import SandboxConfig
from lizard_core.errors import LizardIntegrationError

__all__ = ["IDLE_CHECK_S", "RETRY_S", "KeepAlive"]

T = TypeVar("T")

_log = logging.getLogger("lizard_core.session")

RETRY_S: Final = 15.0
"""After a failed keep-alive, try again this soon (seconds) rather than half a lifetime later."""
IDLE_CHECK_S: Final = 30.0
"""How often (seconds) an idle keeper looks whether its session was dropped without a close."""


class KeepAlive:
    """The keep-alive half of a session; the state it reads is the session's own."""

    _config: SandboxConfig
    _keep_alive: bool
    _lock: threading.Lock
    _closed: bool
    _gone: bool
    _sandbox: Any
    _sandbox_id: str | None
    _extend_due: float | None
    _in_flight: int
    _last_used: float
    _keeper: threading.Thread | None
    _keeper_wake: threading.Condition

    def _extend(self, sandbox: Any) -> None:
        """Set the sandbox's deadline a lifetime ahead (blocking); the session's own call."""
        raise NotImplementedError

    async def _aextend(self, sandbox: Any) -> None:
        """Async :meth:`_extend`."""
        raise NotImplementedError

    def _extension_due(self) -> bool:
        """Claim the next extension if it is due (so that only one caller sends it)."""
        if not self._keep_alive:
            return False
        now = time.monotonic()
        with self._lock:
            if self._extend_due is None or now < self._extend_due or self._closed:
                return False
            self._extend_due = now + RETRY_S  # until this attempt succeeds
            return True

    def _extended(self, started: float, error: LizardIntegrationError | None) -> None:
        if error is not None:
            _log.warning("keep-alive for sandbox %s failed: %s", self._sandbox_id, error)
            return
        with self._lock:
            self._extend_due = started + self._config.lifetime_ms / 2000

    def _maybe_extend(self, sandbox: Any) -> None:
        if not self._extension_due():
            return
        started = time.monotonic()
        try:
            self._extend(sandbox)
        except LizardIntegrationError as error:
            self._extended(started, error)
        else:
            self._extended(started, None)

    async def _amaybe_extend(self, sandbox: Any) -> None:
        if not self._extension_due():
            return
        started = time.monotonic()
        try:
            await self._aextend(sandbox)
        except LizardIntegrationError as error:
            self._extended(started, error)
        else:
            self._extended(started, None)

    @contextlib.contextmanager
    def in_use(self) -> Iterator[None]:
        """Mark an operation in flight for the duration of the block (no request).

        With keep-alive, the session's keeper thread extends the lifetime every half lifetime
        while any operation is in flight, so that one call longer than the lifetime (a long
        command or cell) does not see its sandbox expire under it. The first operation starts
        that thread; later ones only wake it. An operation in flight is also use for the idle
        pause (:mod:`lizard_core._pausing`).
        """
        with self._lock:
            self._in_flight += 1
            if self._keep_alive and not (self._closed or self._gone):
                if self._keeper is None:
                    self._keeper = threading.Thread(
                        target=_keep_alive_until_closed,
                        args=(weakref.ref(self), self._keeper_wake),
                        name="lizard-core-keep-alive",
                        daemon=True,
                    )
                    self._keeper.start()
                elif self._in_flight == 1:
                    self._keeper_wake.notify_all()  # it sleeps while nothing is in flight
        try:
            yield
        finally:
            with self._lock:
                self._in_flight -= 1
                self._last_used = time.monotonic()
                self._keeper_wake.notify_all()


class _Watched(Protocol):
    _closed: bool
    _gone: bool


W = TypeVar("W", bound=_Watched)


def live_session(ref: weakref.ref[W], thread_attr: str) -> W | None:
    """The session a watcher thread holds weakly, or None once it is collected, closed or gone.

    For the session's own threads (this keeper, the idle pause), called with its lock held: a
    closed or gone session also forgets the thread (``thread_attr``), which then ends.
    """
    session = ref()
    if session is None:
        return None
    if session._closed or session._gone:
        setattr(session, thread_attr, None)
        return None
    return session


def _keep_alive_until_closed(ref: weakref.ref[KeepAlive], wake: threading.Condition) -> None:
    """The keeper: extends the session's sandbox while operations are in flight, until it closes.

    It holds the session weakly while it waits (``wake`` is the session's condition), so that a
    session dropped without a close is still collected, and its keeper ends soon after.
    """
    while True:
        with wake:
            while True:
                session = live_session(ref, "_keeper")
                if session is None:
                    return
                now, due = time.monotonic(), session._extend_due
                if session._in_flight and session._sandbox is not None and due is not None:
                    if now >= due:
                        sandbox = session._sandbox
                        break
                    timeout = max(due - now, 0.01)
                else:
                    timeout = IDLE_CHECK_S  # woken by the next operation or the close
                del session
                wake.wait(timeout)
        session._maybe_extend(sandbox)
        del session, sandbox
