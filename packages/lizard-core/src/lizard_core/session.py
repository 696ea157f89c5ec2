"""A handle on one Lizard sandbox, with a synchronous and an asynchronous face.

What holds (tested against lizard-local in ``tests/test_session.py``):

- **No I/O until first use.** Constructing, entering, :attr:`Session.sandbox_id` and ``repr``
  make no request.
- **Exactly one sandbox.** The first :meth:`Session.sandbox` / :meth:`Session.asandbox` creates
  it (or attaches to ``sandbox_id``) once, however many threads and tasks ask; they share its
  result or error. A failed acquisition is not retried behind the caller's back.
  :meth:`Session.open_ahead` starts it in a worker thread while the caller does host-side work;
  the next use waits for it (or gets its error).
- **The id is never lost.** The sandbox is recorded as soon as the create returns; a
  cancelled ``await`` or Ctrl-C waits for the create first (:mod:`lizard_core._bridge`), so
  :meth:`Session.destroy` can still kill it.
- **A create is a create.** A 404 or an unreadable answer to it is a base
  :class:`~lizard_core.errors.LizardIntegrationError`, never
  :class:`~lizard_core.errors.SandboxGoneError` or a raw ``KeyError``.
- **Attach never replaces.** A killed or expired ``sandbox_id`` raises
  :class:`~lizard_core.errors.SandboxGoneError` on every use; nothing is created.
- **Attach whatever the state.** Attaching is one ``GET`` for the status, a resume (bounded
  wait) when the sandbox is paused, and one ``set_timeout`` that renews its lifetime to the
  configuration's when less than half of it is left (read after the resume for a paused one,
  whose lifetime was frozen; never shortening it; a sandbox without a deadline keeps none), so
  a sandbox picked up by a later run does not expire under it.
- **Pause and resume** (:mod:`lizard_core._pausing`): explicit, or after ``idle_pause_s`` idle
  seconds; the next operation resumes transparently; fresh boots are counted for the kernel.
  :meth:`Session.keep_paused` pauses and lets go (a failed pause destroys: nothing left billing;
  a create in flight is waited for and paused, its waiters refused).
- **Open without leftovers.** :meth:`Session.aopen` is :meth:`Session.asandbox` that, when it
  fails or is cancelled, releases the session first: a sandbox it was creating is destroyed.
- **Copies.** ``snapshot_id`` starts the sandbox from a snapshot (:mod:`lizard_core.snapshots`),
  ``volume`` mounts a volume by name at ``/workspace``, made if absent
  (:mod:`lizard_core.volumes`); :func:`lizard_core.forks.fork_sessions` makes forks.
- **Destroy is idempotent and retryable.** A 404 counts as done; a failed kill is raised and
  the id kept. After :meth:`Session.destroy` or :meth:`Session.close` every use raises
  :class:`~lizard_core.errors.SandboxGoneError`.
- **Context managers** make no request on entry. On exit (``destroy_on_exit=None``) the
  sandbox is destroyed only if this session created it; ``True`` or ``False`` decide for both.
  A failure to destroy is raised, or attached as a note to the block's own exception.
  :meth:`Session.release` ends the session the same way, for adapters with a ``close()``: a
  create in flight is waited for, then destroyed, and the calls that waited for it raise
  :class:`~lizard_core.errors.SandboxGoneError` (one not yet started is not sent at all).
- **Keep-alive** (``keep_alive=True``): a sandbox in use does not expire, an idle one still
  does (:mod:`lizard_core._keep_alive`).
- **Is it still there?** :meth:`Session.check_alive` (one ``GET``, failure paths only) records a
  gone sandbox, so later uses fail at once.
- **Errors and retries.** Only :class:`~lizard_core.errors.LizardIntegrationError` kinds are
  raised. Idempotent calls are retried on transient failures, honouring ``retry_after``; a
  create never is.
- **Credentials.** The API key goes only to the SDK and the pooled client's header.
- **Project.** Creating needs one (else :class:`ValueError` at construction); attaching does not.
- **One pooled connection** (:meth:`Session.transport`) carries the create, execs and files
  requests; the other lifecycle calls stay on the SDK.
- **Cost.** A new sandbox is one ``POST /api/sandboxes`` (the SDK resolves the project once per
  process); no read-back follows.
"""

from __future__ import annotations

import concurrent.futures
import logging
import re
import threading
import time
from collections.abc import Callable
from typing import Any, Final, TypeVar

import anyio
from lizard import Sandbox

from lizard_core._acquisition import Acquisition
from lizard_core._bridge import run_blocking
from lizard_core._keep_alive import KeepAlive
from lizard_core._liveness import GONE_STATUSES, confirm_alive
from lizard_core._pausing import DEFAULT_STATE_WAIT_S, Pausing
from lizard_core._retry import RetryPolicy, attempts
from lizard_core._teardown import Teardown
from lizard_core._transport import Transport
from lizard_core.checks import check_seconds
from lizard_core.config import SandboxConfig
from lizard_core.errors import (
    SandboxGoneError,
    translated,
)
from lizard_core.snapshots import check_snapshot_id
from lizard_core.volumes import (
    DEFAULT_VOLUME_SIZE_GB,
    check_volume_name,
    check_volume_size,
)

__all__ = ["GONE_STATUSES", "RetryPolicy", "Session", "confirm_alive"]

T = TypeVar("T")

_log = logging.getLogger(__name__)

_SANDBOX_ID: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")


class Session(Acquisition, KeepAlive, Pausing, Teardown):
    """A lazily created (or attached) Lizard sandbox shared by threads and tasks.

    ``sandbox_id`` attaches to an existing sandbox instead of creating one, whatever its state.
    ``snapshot_id`` creates it from a snapshot; ``volume`` (a volume's name, made if absent with
    ``volume_size_gb``) mounts at ``/workspace``. ``keep_alive`` extends the sandbox's lifetime
    while the session is used; ``idle_pause_s`` pauses it after that many idle seconds, and
    ``state_wait_s`` bounds each wait for a pause or resume. ``destroy_on_exit`` chooses what
    leaving a ``with`` block does (None: destroy only a sandbox this session created).
    ``retry`` sets the retry policy for idempotent calls. See the module docstring for the
    guarantees.
    """

    def __init__(
        self,
        config: SandboxConfig,
        *,
        sandbox_id: str | None = None,
        keep_alive: bool = False,
        destroy_on_exit: bool | None = None,
        retry: RetryPolicy | None = None,
        idle_pause_s: float | None = None,
        state_wait_s: float = DEFAULT_STATE_WAIT_S,
        snapshot_id: str | None = None,
        volume: str | None = None,
        volume_size_gb: int = DEFAULT_VOLUME_SIZE_GB,
    ) -> None:
        if not isinstance(config, SandboxConfig):
            raise TypeError(f"config must be a SandboxConfig, not {type(config).__name__}")
        if sandbox_id is not None:
            if not isinstance(sandbox_id, str):
                raise TypeError(f"sandbox_id must be a str, not {type(sandbox_id).__name__}")
            if not _SANDBOX_ID.fullmatch(sandbox_id):
                # The SDK puts the id into the URL path unescaped; refuse anything path-like.
                raise ValueError(f"sandbox_id {sandbox_id!r} is not a sandbox id")
        if type(keep_alive) is not bool:
            raise TypeError("keep_alive must be a bool")
        if destroy_on_exit is not None and type(destroy_on_exit) is not bool:
            raise TypeError("destroy_on_exit must be a bool or None")
        if retry is not None and not isinstance(retry, RetryPolicy):
            raise TypeError("retry must be a RetryPolicy or None")
        if idle_pause_s is not None:
            idle_pause_s = check_seconds(idle_pause_s, name="idle_pause_s")
        state_wait_s = check_seconds(state_wait_s, name="state_wait_s")
        if snapshot_id is not None:
            if sandbox_id is not None:
                raise ValueError("give sandbox_id (attach) or snapshot_id (restore), not both")
            check_snapshot_id(snapshot_id)
        if volume is not None:
            if sandbox_id is not None:
                raise ValueError("a volume is mounted at create; an attached sandbox has its own")
            check_volume_name(volume)
        check_volume_size(volume_size_gb)
        if sandbox_id is None:
            # Checked here, before any request: only a create needs the project.
            config.require_project()

        self._config = config
        self._keep_alive = keep_alive
        self._destroy_on_exit = destroy_on_exit
        self._retry = retry or RetryPolicy()

        self._lock = threading.Lock()  # guards the fields below; never held during I/O
        self._destroy_lock = threading.Lock()  # serialises destroy() calls
        self._sandbox_id = sandbox_id
        self._sandbox: Any = None  # lizard.Sandbox once acquired
        self._acquiring: concurrent.futures.Future[Any] | None = None
        # An acquisition open_ahead() started: its error goes to the next caller, once.
        self._ahead: concurrent.futures.Future[Any] | None = None
        self._created = False
        self._gone = False
        # Gone, but the platform still lists its record (a terminal status, not a 404): a
        # destroy() still deletes it.
        self._gone_listed = False
        self._closed = False
        self._destroyed = False
        # monotonic time at which keep-alive should next extend the lifetime
        self._extend_due: float | None = None
        self._transport: Transport | None = None  # the pooled client, made on first use
        # Operations in flight (see in_use()), and the session's one keep-alive thread, which
        # extends the sandbox while there are any.
        self._in_flight = 0
        self._keeper: threading.Thread | None = None
        self._keeper_wake = threading.Condition(self._lock)
        self._idle_pause_s = idle_pause_s
        self._state_wait_s = state_wait_s
        self._snapshot_id = snapshot_id
        self._volume = volume
        self._volume_size_gb = volume_size_gb
        self._state_lock = threading.RLock()  # serialises pause and resume
        self._paused = False
        self._pending: str | None = None
        self._boot_epoch = 0
        self._boot_notice: str | None = None
        self._last_used = time.monotonic()
        self._idler: threading.Thread | None = None
        self._pause_failed = False  # keep_paused() could not pause: it destroys instead
        # The first sandbox of this one's line (a fork's source's): kernels are keyed by it, so
        # that a fork which keeps memory finds its source's kernel.
        self._lineage_id: str | None = None

    # ── public state ─────────────────────────────────────────────────────

    @property
    def config(self) -> SandboxConfig:
        """The configuration the sandbox is (or will be) created with."""
        return self._config

    @property
    def sandbox_id(self) -> str | None:
        """The sandbox's id: the attached id, or the created one as soon as create returned."""
        with self._lock:
            return self._sandbox_id

    @property
    def created(self) -> bool:
        """True when this session created its sandbox (rather than attaching to it)."""
        with self._lock:
            return self._created

    @property
    def destroyed(self) -> bool:
        """True once :meth:`destroy` has finished (the sandbox is gone or never existed)."""
        with self._lock:
            return self._destroyed

    @property
    def lineage_id(self) -> str | None:
        """The id of the first sandbox of this one's line: a fork's source's, else its own."""
        with self._lock:
            return self._lineage_id or self._sandbox_id

    @property
    def volume(self) -> str | None:
        """The name of the volume mounted at ``/workspace`` when this session creates."""
        return self._volume

    @property
    def keep_alive(self) -> bool:
        """Whether use of the session extends the sandbox's lifetime."""
        return self._keep_alive

    def api_kwargs(self) -> dict[str, str]:
        """``api_key`` and ``api_url`` for lizard-sdk calls; never log the result."""
        return self._config.api_kwargs()

    def __repr__(self) -> str:
        with self._lock:
            state = (
                "destroyed"
                if self._destroyed
                else "closed"
                if self._closed
                else "gone"
                if self._gone
                else "paused"
                if self._paused
                else "ready"
                if self._sandbox is not None
                else "opening"
                if self._acquiring is not None
                else "lazy"
            )
            return (
                f"Session(sandbox_id={self._sandbox_id!r}, state={state}, "
                f"created={self._created}, keep_alive={self._keep_alive})"
            )

    def transport(self) -> Transport:
        """This session's pooled client for the create, exec and files (:mod:`._transport`).

        Made on first use (no request; its connection opens with the first request sent) and
        shared by every thread; closed by :meth:`destroy` / :meth:`close`, after which this
        raises :class:`~lizard_core.errors.SandboxGoneError` like any other use.
        """
        with self._lock:
            if self._destroyed or self._closed:
                self._check_usable()
            self._last_used = time.monotonic()  # each request's start counts as use
            if self._transport is None:
                self._transport = Transport(**self.api_kwargs())
            return self._transport

    def adopt_copy(self, sandbox: Any, notice: str) -> Session:
        """A new session that created ``sandbox``, a copy of this one's (a fork); no request.

        It has this session's configuration, keep-alive, idle pause and lineage; ``notice``
        is what its kernel reports if the copy booted fresh.
        """
        copy = Session(
            self._config,
            sandbox_id=str(sandbox.sandbox_id),
            keep_alive=self._keep_alive,
            retry=self._retry,
            idle_pause_s=self._idle_pause_s,
            state_wait_s=self._state_wait_s,
        )
        with copy._lock:
            copy._sandbox = sandbox
            copy._created = True
            copy._lineage_id = self.lineage_id
            if copy._keep_alive:
                copy._extend_due = time.monotonic() + self._config.lifetime_ms / 2000
        copy._booted_fresh(notice)
        return copy

    # ── liveness ─────────────────────────────────────────────────────────

    def check_alive(self) -> None:
        """Raise :class:`~lizard_core.errors.SandboxGoneError` if the sandbox no longer exists.

        One ``GET /api/sandboxes/{id}``, not retried; meant for failure paths (see the module
        docstring). A sandbox found gone is recorded: every later use of the session raises
        :class:`~lizard_core.errors.SandboxGoneError` without a request. Returns when the
        sandbox exists. A session that has no sandbox id yet makes no request and returns; a
        destroyed or closed one raises at once. If the check itself fails, its translated error
        is raised (a caller holding another error should keep that one).
        """
        with self._lock:
            self._check_usable()
            sandbox, sandbox_id = self._sandbox, self._sandbox_id
        if sandbox_id is None:
            return
        handle = sandbox if sandbox is not None else Sandbox(sandbox_id, **self.api_kwargs())
        try:
            confirm_alive(handle)
        except SandboxGoneError as gone:
            with self._lock:
                self._gone = True
                self._gone_listed = gone.status_code != 404
            _log.debug("sandbox %s is gone", sandbox_id)
            raise

    async def acheck_alive(self) -> None:
        """Async :meth:`check_alive`; a cancellation waits for the request already sent."""
        await run_blocking(self.check_alive)

    # ── calls ────────────────────────────────────────────────────────────

    def call(
        self,
        fn: Callable[..., T],
        /,
        *args: Any,
        idempotent: bool = False,
        passthrough: tuple[type[BaseException], ...] = (),
        **kwargs: Any,
    ) -> T:
        """Run the SDK call ``fn(*args, **kwargs)`` with error translation (blocking).

        ``idempotent=True`` allows retries on transient failures (see
        :class:`~lizard_core._retry.RetryPolicy`); leave it False for anything that must not
        run twice. Exceptions of the ``passthrough`` types (e.g. ``lizard.NotFoundError`` for
        a file read) propagate untranslated. Counts as use for keep-alive, and is in flight
        until it returns: an idle pause never comes under it (a snapshot or fork takes time).
        """
        with self._lock:
            sandbox = self._sandbox
        if sandbox is not None:
            self._maybe_extend(sandbox)
        with self.in_use():
            return self._call_with_retries(
                fn, *args, idempotent=idempotent, passthrough=passthrough, **kwargs
            )

    async def acall(
        self,
        fn: Callable[..., T],
        /,
        *args: Any,
        idempotent: bool = False,
        passthrough: tuple[type[BaseException], ...] = (),
        **kwargs: Any,
    ) -> T:
        """Async :meth:`call`: each attempt runs in a worker thread via the bridge."""
        with self._lock:
            sandbox = self._sandbox
        if sandbox is not None:
            await self._amaybe_extend(sandbox)
        with self.in_use():
            for attempt in attempts(self._retry, idempotent=idempotent, name=_name(fn)):
                with attempt, translated(sandbox_id=self._sandbox_id, passthrough=passthrough):
                    return await run_blocking(fn, *args, **kwargs)
                await anyio.sleep(attempt.delay)
        raise AssertionError("unreachable: attempts() is endless")

    def _call_with_retries(
        self,
        fn: Callable[..., T],
        /,
        *args: Any,
        idempotent: bool,
        passthrough: tuple[type[BaseException], ...] = (),
        **kwargs: Any,
    ) -> T:
        for attempt in attempts(self._retry, idempotent=idempotent, name=_name(fn)):
            with attempt, translated(sandbox_id=self._sandbox_id, passthrough=passthrough):
                return fn(*args, **kwargs)
            time.sleep(attempt.delay)
        raise AssertionError("unreachable: attempts() is endless")

    def _extend(self, sandbox: Any) -> None:
        self._call_with_retries(sandbox.set_timeout, self._config.lifetime_ms, idempotent=True)

    async def _aextend(self, sandbox: Any) -> None:
        await self.acall(sandbox.set_timeout, self._config.lifetime_ms, idempotent=True)

    def __enter__(self) -> Session:
        return self

    def __exit__(self, _type: object, exc: BaseException | None, _tb: object) -> None:
        self._exit(exc)

    async def __aenter__(self) -> Session:
        return self

    async def __aexit__(self, _type: object, exc: BaseException | None, _tb: object) -> None:
        await run_blocking(self._exit, exc)


def _name(fn: Callable[..., Any]) -> str:
    return getattr(fn, "__qualname__", None) or type(fn).__name__
