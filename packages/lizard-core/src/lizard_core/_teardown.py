"""Destroy and close (mixed into :class:`~lizard_core.session.Session`).

Contract (the session's module docstring states it for users):

- :meth:`Teardown.destroy` kills the sandbox; idempotent, and retryable after a failure (the id
  is kept). A 404 counts as done. An acquisition in flight is waited for first.
- :meth:`Teardown.close` makes no request and leaves the sandbox as it is, running or paused,
  for another session to attach to.
- :meth:`Teardown.keep_paused` pauses, then closes; a failed pause destroys instead (retried by
  a later call if that fails too), and a sandbox already gone counts as kept. A create in
  flight is waited for and paused (its waiters are refused), not left running.
- Either way the session is closed: its pooled connection goes, and every later use raises
  :class:`~lizard_core.errors.SandboxGoneError`.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from typing import Any

from lizard import Sandbox

from lizard_core._bridge import run_blocking
from lizard_core._jobs import forget_cleanup
from lizard_core._transport import Transport
from lizard_core.errors import LizardIntegrationError, SandboxGoneError

__all__ = ["Teardown"]

_log = logging.getLogger("lizard_core.session")


class Teardown:
    """The teardown half of a session; the state it reads is the session's own."""

    _lock: threading.Lock
    _destroy_lock: threading.Lock
    _keeper_wake: threading.Condition
    _acquiring: concurrent.futures.Future[Any] | None
    _sandbox: Any
    _sandbox_id: str | None
    _gone: bool
    _gone_listed: bool
    _closed: bool
    _destroyed: bool
    _created: bool
    _destroy_on_exit: bool | None
    _transport: Transport | None
    _pause_failed: bool

    def api_kwargs(self) -> dict[str, str]:
        raise NotImplementedError

    def _call_with_retries(self, fn: Any, /, *args: Any, idempotent: bool, **kwargs: Any) -> Any:
        raise NotImplementedError

    def _found_paused(self, attach_id: str) -> bool:
        raise NotImplementedError

    def _pause_now(self, sandbox: Any, *, idle: bool) -> None:
        raise NotImplementedError

    def keep_paused(self) -> None:
        """Pause the sandbox and stop using it, leaving it paused for a later attach (blocking).

        A sandbox already gone counts as done. A create in flight is waited for and its sandbox
        paused; the calls that waited for it raise :class:`~lizard_core.errors.SandboxGoneError`.
        One whose pause fails is destroyed rather than left running (billing), and the pause's
        error is raised. The session is closed either way. If that destroy fails too, its error
        is raised and a later call tries the destroy again.
        """
        with self._lock:
            destroy_only = self._pause_failed
        if destroy_only:
            self.destroy()  # idempotent: no request once it has succeeded
            return
        try:
            self._pause_to_keep()
        except SandboxGoneError:
            pass
        except LizardIntegrationError:
            with self._lock:
                self._pause_failed = True
            self.destroy()
            raise
        self.close()

    def _pause_to_keep(self) -> None:
        """Close to new calls, wait for a create or attach in flight, then pause what there is.

        Closed first, as a release is: the callers waiting for that create are refused, so none
        resumes the sandbox paused here, and a create in flight is paused, not left running.
        """
        with self._lock:
            if self._destroyed or self._closed or self._gone:
                return  # nothing of this session's to pause (a gone one counts as kept)
            in_flight = self._close_locked()
        if in_flight is not None:
            concurrent.futures.wait([in_flight])
        with self._lock:
            sandbox, attach_id = self._sandbox, self._sandbox_id
        if sandbox is None:
            if attach_id is None or in_flight is not None:
                return  # never created, or its create or attach failed: nothing runs
            # An attach not yet made: a sandbox already paused is left so (one GET).
            if self._found_paused(attach_id):
                return
            sandbox = Sandbox(attach_id, **self.api_kwargs())
        self._pause_now(sandbox, idle=False)

    def _close_locked(self) -> concurrent.futures.Future[Any] | None:
        """Close the session (``_lock`` held): no new acquisition starts from here on.

        Returns the acquisition in flight, for the caller to wait for outside the lock. One its
        owner has not started yet is cancelled instead: no create was sent, and a close on an
        event loop's own thread would wait for it forever (the loop starts its thread).
        """
        self._closed = True
        self._keeper_wake.notify_all()
        in_flight = self._acquiring
        if in_flight is not None and in_flight.cancel():
            return None  # its owner, when it runs, finds the session closed
        return in_flight

    async def akeep_paused(self) -> None:
        """Async :meth:`keep_paused`; a cancellation waits for the request already sent."""
        await run_blocking(self.keep_paused)

    def destroy(self) -> None:
        """Kill the sandbox (blocking); idempotent, and retryable after a failure.

        Waits for an acquisition in flight first, so a sandbox being created is not missed.
        A sandbox that is already gone (404) counts as destroyed. On failure the error is
        raised and the id kept, so that ``destroy()`` can be called again.
        """
        self._teardown(kill=True)

    async def adestroy(self) -> None:
        """Async :meth:`destroy`; a cancellation waits for a kill already sent."""
        await run_blocking(self._teardown, kill=True)

    def close(self) -> None:
        """Stop using the session without killing the sandbox (no request is made).

        The sandbox keeps running until its lifetime ends; :attr:`sandbox_id` stays readable so
        that another session can attach to it. Use :meth:`destroy` to kill it.
        """
        self._teardown(kill=False)

    async def aclose(self) -> None:
        """Async :meth:`close`."""
        await run_blocking(self._teardown, kill=False)

    def release(self) -> None:
        """End the session as leaving its ``with`` block does (blocking).

        Destroys the sandbox if this session created it, else stops using it (as
        :meth:`close`); ``destroy_on_exit`` decides instead when given. A create in flight is
        waited for first, so a sandbox being created for a racing caller is not left running.
        """
        self._teardown(kill=self._destroy_on_exit)

    async def arelease(self) -> None:
        """Async :meth:`release`."""
        await run_blocking(self.release)

    def _teardown(self, *, kill: bool | None) -> None:
        """Close the session, then kill the sandbox if ``kill`` (None: if this session made it).

        Closed before a create in flight is waited for, so that the callers waiting for that
        create are refused (they see a closed session) rather than racing the kill.
        """
        with self._destroy_lock:
            with self._lock:
                if self._destroyed:
                    return
                in_flight = self._close_locked()
            if in_flight is not None:
                concurrent.futures.wait([in_flight])
            with self._lock:
                sandbox, sandbox_id = self._sandbox, self._sandbox_id
                known_gone = self._gone and not self._gone_listed
                if kill is None:
                    kill = self._created  # the create in flight decided what we own
            try:
                if kill and sandbox_id is not None and not known_gone:
                    handle = (
                        sandbox if sandbox is not None else Sandbox(sandbox_id, **self.api_kwargs())
                    )
                    # kill() answers False for a sandbox already gone: that counts as done.
                    self._call_with_retries(handle.kill, idempotent=True)
                    _log.debug("destroyed sandbox %s", sandbox_id)
                if (kill or known_gone) and sandbox_id is not None:
                    forget_cleanup(sandbox_id)  # no request will ever carry its job folders
            finally:
                # The session is closed either way, so its pooled connection goes now (after
                # the kill, so that a stream in flight ends with its sandbox, not before).
                with self._lock:
                    transport, self._transport = self._transport, None
                if transport is not None:
                    transport.close()
            if sandbox is not None:
                sandbox.close()  # releases the SDK's connection pool, if it made one
            with self._lock:
                self._destroyed = kill
                self._sandbox = None

    def _exit(self, exc: BaseException | None) -> None:
        try:
            self._teardown(kill=self._destroy_on_exit)
        except Exception as error:
            if exc is None:
                raise
            _log.warning("could not destroy sandbox %s on exit: %s", self._sandbox_id, error)
            exc.add_note(f"lizard_core: destroying sandbox {self._sandbox_id} failed: {error}")
