"""The one create or attach of a session (mixed into :class:`~lizard_core.session.Session`).

Contract (the session's module docstring states it for users):

- :meth:`Acquisition.sandbox` / :meth:`Acquisition.asandbox` create the sandbox (or attach to
  the session's ``sandbox_id``) once, however many threads and tasks ask; they share its
  result or error, and a failed acquisition is not retried behind the caller's back.
- The create runs in a worker thread that records the sandbox before anyone can cancel the
  result away: a cancelled ``await`` or Ctrl-C waits for it, so the id is never lost.
- :meth:`Acquisition.open_ahead` starts that worker early; its error goes to the next caller.
- A session closed (or destroyed) while callers wait for its create refuses them with
  :class:`~lizard_core.errors.SandboxGoneError`; a close that comes before the create was
  started cancels it, so that nothing is sent (see :mod:`lizard_core._teardown`).
- :meth:`Acquisition.aopen` releases the session when the start fails or is cancelled.
- The create goes over the session's pooled connection (:mod:`lizard_core._create`); the
  project is resolved to its id once per process, under one lock.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import threading
import time
from typing import TYPE_CHECKING, Any, Final

from lizard.config import ConnectionConfig
from lizard.project import resolve_project_id

from lizard_core._bridge import run_blocking, wait_done
from lizard_core._create import create_request, send_create
from lizard_core._pausing import RESTORED_NOTICE
from lizard_core.config import SandboxConfig
from lizard_core.errors import (
    MALFORMED_ANSWER,
    SandboxGoneError,
    malformed_answer,
    translated,
)
from lizard_core.volumes import ensure_volume

if TYPE_CHECKING:
    from lizard_core._transport import Transport

__all__ = ["Acquisition"]

_log = logging.getLogger("lizard_core.session")

_PROJECT_LOOKUP: Final = threading.Lock()


class Acquisition:
    """The acquisition half of a session; the state it reads is the session's own."""

    _config: SandboxConfig
    _lock: threading.Lock
    _sandbox: Any
    _sandbox_id: str | None
    _acquiring: concurrent.futures.Future[Any] | None
    _ahead: concurrent.futures.Future[Any] | None
    _created: bool
    _gone: bool
    _closed: bool
    _destroyed: bool
    _paused: bool
    _keep_alive: bool
    _extend_due: float | None
    _idle_pause_s: float | None
    _snapshot_id: str | None
    _volume: str | None
    _volume_size_gb: int

    if TYPE_CHECKING:  # the session's other halves; declared for the type checker only

        def api_kwargs(self) -> dict[str, str]: ...
        def transport(self) -> Transport: ...
        def in_use(self) -> contextlib._GeneratorContextManager[None]: ...
        def _ensure_running(self, sandbox: Any) -> None: ...
        def _maybe_extend(self, sandbox: Any) -> None: ...
        async def _amaybe_extend(self, sandbox: Any) -> None: ...
        def _attach(self, attach_id: str) -> Any: ...
        def _booted_fresh(self, notice: str) -> None: ...
        async def arelease(self) -> None: ...

    def sandbox(self) -> Any:
        """Return the ``lizard.Sandbox``, creating or attaching on first use (blocking).

        Safe to call from many threads at once: one acquisition, shared by all. A sandbox this
        session paused is resumed first.
        """
        sandbox = self._acquired()
        self._ensure_running(sandbox)
        if self._idle_pause_s is None:
            self._maybe_extend(sandbox)
        else:
            with self.in_use():  # a slow extension is use: no idle pause before the operation
                self._maybe_extend(sandbox)
        return sandbox

    def open_ahead(self) -> None:
        """Start creating (or attaching to) the sandbox in a worker thread; return at once.

        For a caller with host-side work to do before its first operation: the create runs
        meanwhile, and the next :meth:`sandbox` or :meth:`asandbox` waits for it, or raises
        its error (to that caller only: a later use tries again, as after any failed
        acquisition). Does nothing when the sandbox is there or being acquired, or the
        session is closed.
        """
        with self._lock:
            if self._destroyed or self._closed or self._gone:
                return
            if self._sandbox is not None or self._acquiring is not None:
                return
            future: concurrent.futures.Future[Any] = concurrent.futures.Future()
            self._acquiring = self._ahead = future

        def acquire() -> None:
            with contextlib.suppress(BaseException):  # the outcome is in ``future``
                self._acquire(future)

        try:
            threading.Thread(target=acquire, name="lizard-core-acquire", daemon=True).start()
        except RuntimeError:  # no thread to be had: the next use creates it itself
            with self._lock:
                if self._ahead is future:
                    self._ahead = None
                if self._acquiring is future:
                    self._acquiring = None
            future.cancel()  # a caller already waiting on it claims again

    def _acquired(self) -> Any:
        while True:
            sandbox, future, owner = self._claim()
            if sandbox is not None:
                break
            assert future is not None
            if owner:
                try:
                    sandbox = self._acquire_uninterrupted(future)
                except concurrent.futures.CancelledError:
                    continue  # a close cancelled it before it started: the claim says so
                finally:
                    self._release_unstarted(future)
                break
            try:
                sandbox = future.result()
                break
            except concurrent.futures.CancelledError:
                continue  # its owner gave up before starting: claim it again
        self._still_usable()
        return sandbox

    async def asandbox(self) -> Any:
        """Return the ``lizard.Sandbox``, creating or attaching on first use (async).

        Safe from many tasks at once. The create runs in a worker thread that records the
        sandbox itself; a cancelled caller waits for it to finish, then is cancelled.
        """
        while True:
            sandbox, future, owner = self._claim()
            if sandbox is not None:
                break
            assert future is not None
            if owner:
                try:
                    sandbox = await run_blocking(self._acquire, future)
                except concurrent.futures.CancelledError:
                    continue  # a close cancelled it before it started: the claim says so
                finally:
                    # Under trio a caller cancelled before the thread started never runs
                    # _acquire; hand the claim back so that waiters are not stranded.
                    self._release_unstarted(future)
                break
            await wait_done(future)
            if future.cancelled():
                continue
            sandbox = future.result()
            break
        self._still_usable()
        if self._idle_pause_s is not None or self._paused:
            await run_blocking(self._ensure_running, sandbox)
        if self._idle_pause_s is None:
            await self._amaybe_extend(sandbox)
        else:
            with self.in_use():  # a slow extension is use: no idle pause before the operation
                await self._amaybe_extend(sandbox)
        return sandbox

    def _check_usable(self) -> None:
        if self._destroyed or self._closed:
            raise SandboxGoneError(
                "This session was destroyed or closed; start a new Session.",
                sandbox_id=self._sandbox_id,
            )
        if self._gone:
            raise SandboxGoneError(
                f"The sandbox {self._sandbox_id} no longer exists (killed or expired).",
                sandbox_id=self._sandbox_id,
            )

    def _still_usable(self) -> None:
        # A session closed while this caller waited for its create refuses the call, rather
        # than run it on a sandbox that the close is destroying (a race either way it went).
        with self._lock:
            self._check_usable()

    def _claim(self) -> tuple[Any, concurrent.futures.Future[Any] | None, bool]:
        """Return (sandbox, None, False), or the acquisition future and whether we own it."""
        with self._lock:
            self._check_usable()
            ahead, self._ahead = self._ahead, None
            if self._sandbox is not None:
                return self._sandbox, None, False
            if ahead is not None and ahead.done():
                return None, ahead, False  # it failed: its error is this caller's
            if self._acquiring is None:
                self._acquiring = concurrent.futures.Future()
                return None, self._acquiring, True
            return None, self._acquiring, False

    def _release_unstarted(self, future: concurrent.futures.Future[Any]) -> None:
        with self._lock:
            # cancel() succeeds only on a future _acquire never started.
            if self._acquiring is future and future.cancel():
                self._acquiring = None

    def _acquire(self, future: concurrent.futures.Future[Any]) -> Any:
        """Create or attach, record the sandbox, and complete ``future``. Runs in one thread."""
        if not future.set_running_or_notify_cancel():
            raise concurrent.futures.CancelledError
        try:
            sandbox = self._open()
        except BaseException as exc:
            with self._lock:
                self._acquiring = None
            future.set_exception(exc)
            raise
        with self._lock:
            self._acquiring = None
        future.set_result(sandbox)
        return sandbox

    def _acquire_uninterrupted(self, future: concurrent.futures.Future[Any]) -> Any:
        """Run :meth:`_acquire` in a worker thread and wait for it, Ctrl-C or not.

        A ``KeyboardInterrupt`` raised into the create's HTTP read would lose the id of a
        sandbox already made; in a worker thread the create completes and records it, and the
        interrupt is raised here afterwards (a ``with`` block's exit then destroys it).
        """

        def acquire() -> None:
            with contextlib.suppress(BaseException):  # the outcome is in ``future``
                self._acquire(future)

        threading.Thread(target=acquire, name="lizard-core-acquire", daemon=True).start()
        interrupted: BaseException | None = None
        while True:
            try:
                concurrent.futures.wait([future])
                break
            except BaseException as exc:  # KeyboardInterrupt: wait for the create all the same
                interrupted = interrupted or exc
        if interrupted is not None:
            raise interrupted
        return future.result()

    def _open(self) -> Any:
        with self._lock:
            attach_id = self._sandbox_id
        if attach_id is not None:
            return self._attach(attach_id)
        if self._volume is not None:
            ensure_volume(self._config, self._volume, size_gb=self._volume_size_gb)
        started = time.monotonic()
        # Never retried: a create that failed in transit may have made a sandbox whose id we
        # would never learn; a second create would make another. (So may one whose answer
        # cannot be read: its sandbox, if any, ends with its lifetime.)
        with translated(creating=True):
            request = create_request(**self._create_kwargs())
            try:
                sandbox = send_create(self.transport(), request)
            except MALFORMED_ANSWER as exc:
                raise malformed_answer("create", exc) from exc
        with self._lock:
            # Recorded here, in the worker thread, before anyone can cancel the result away.
            self._sandbox = sandbox
            self._sandbox_id = sandbox.sandbox_id
            self._created = True
            if self._keep_alive:
                self._extend_due = started + self._config.lifetime_ms / 2000
        if self._snapshot_id is not None:
            self._booted_fresh(RESTORED_NOTICE)
        _log.debug("created sandbox %s", sandbox.sandbox_id)
        return sandbox

    def _create_kwargs(self) -> dict[str, Any]:
        """The create's arguments with the project already resolved to its id.

        The SDK caches the look-up (``GET /api/projects``), but sessions created at once all
        miss that cache; resolving under one lock makes it one look-up for all of them.
        """
        kwargs = self._config.create_kwargs()
        with _PROJECT_LOOKUP:
            kwargs["project_id"] = resolve_project_id(
                kwargs.pop("project"), ConnectionConfig(**self.api_kwargs())
            )
        if self._snapshot_id is not None:
            # The snapshot fixes the template, size and region; the tags still apply.
            for key in ("template", "size", "region"):
                kwargs.pop(key, None)
            kwargs["snapshot_id"] = self._snapshot_id
        if self._volume is not None:
            kwargs.pop("region", None)  # a volume is node-local: the platform places it
            kwargs["volume_name"] = self._volume
        return kwargs

    async def aopen(self) -> Any:
        """:meth:`asandbox` for a start that must not leave a sandbox behind when it fails.

        On any failure, cancellation included, the session is released first (as
        :meth:`arelease`: a sandbox it created, already recorded, is destroyed; an attached one
        is left as it was), then the error propagates.
        """
        try:
            return await self.asandbox()
        except BaseException:
            await self.arelease()
            raise
