"""Run the blocking lizard-sdk from async code without losing a call that was already sent.

Contract:

- :func:`run_blocking` runs ``fn(*args, **kwargs)`` in a worker thread (anyio's thread pool,
  with the caller's context variables) and returns its result or raises its exception.
- Cancellation never abandons the thread. If the awaiting task is cancelled after the call
  started, the task keeps waiting until the call has finished (its result or error is
  discarded; callers that must not lose it store it from inside ``fn``) and only then lets the
  cancellation propagate. Repeated cancellations while waiting do not cut the wait short.
  This is what keeps a sandbox created during a cancelled ``await`` from leaking. The wait
  is shielded, so it sleeps until the call ends rather than spinning (an anyio scope would
  otherwise re-deliver its cancellation at every checkpoint).
- Works under asyncio (native ``Task.cancel()`` and anyio cancel scopes alike) and under trio
  (through anyio). Any other event loop, or no running loop, raises :class:`RuntimeError` at
  once with a message that says so.
- :func:`wait_done` awaits a :class:`concurrent.futures.Future` that another thread completes,
  without holding a worker thread, and leaves reading the result to the caller.
- :func:`wait_done_uncancellable` does the same and keeps waiting through cancellations.
- :func:`arun_cancellable` runs a blocking call that takes a :class:`Cancellation` in a thread
  of its own: a cancelled awaiting task sets the cancellation, waits for the call to end, then
  lets the cancellation propagate.
- :func:`loop_callback` lets a worker thread call back into the event loop's thread, in order.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import importlib
import logging
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import anyio
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread

__all__ = [
    "Cancellation",
    "arun_cancellable",
    "loop_callback",
    "run_blocking",
    "wait_done",
    "wait_done_uncancellable",
]

T = TypeVar("T")

_log = logging.getLogger(__name__)


def _current_library() -> str | None:
    # sniffio comes with trio (and optionally with anyio); without it only asyncio can be running.
    try:
        sniffio = importlib.import_module("sniffio")
    except ImportError:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return None
        return "asyncio"
    try:
        return str(sniffio.current_async_library())
    except sniffio.AsyncLibraryNotFoundError:
        return None


def _async_library() -> str:
    library = _current_library()
    if library is None:
        raise RuntimeError(
            "lizard_core's async API must be awaited inside a running asyncio or trio event loop"
        )
    if library not in ("asyncio", "trio"):
        raise RuntimeError(
            f"lizard_core's async API supports asyncio and trio, not {library!r}; "
            "use the synchronous API from a worker thread instead"
        )
    return library


async def run_blocking(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """Run the blocking ``fn(*args, **kwargs)`` in a worker thread and await its result.

    A cancellation that arrives while ``fn`` runs waits for ``fn`` to return, then propagates.
    """
    call = functools.partial(fn, *args, **kwargs)
    if _async_library() == "trio":
        # trio's to_thread with abandon_on_cancel=False is uncancellable until the thread ends;
        # the checkpoint afterwards delivers a cancellation that arrived meanwhile.
        result = await anyio.to_thread.run_sync(call, abandon_on_cancel=False)
        await anyio.lowlevel.checkpoint_if_cancelled()
        return result
    return await _run_under_asyncio(call)


async def _run_under_asyncio(call: Callable[[], T]) -> T:
    # anyio shields the thread only from anyio cancel scopes; a native Task.cancel() would
    # abandon it. Running it as its own task and shielding that task covers both.
    task: asyncio.Task[T] = asyncio.ensure_future(
        anyio.to_thread.run_sync(call, abandon_on_cancel=False)
    )
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        if not task.done():
            await _wait_uncancellable(task)
        if not task.cancelled():
            task.exception()  # retrieved: the caller's cancellation wins over fn's outcome
        raise


async def _wait_uncancellable(task: asyncio.Future[Any]) -> None:
    # The shielded scope stops an anyio scope from re-delivering its cancellation at every
    # await (which made this loop spin a core until the call ended); the loop still absorbs a
    # native Task.cancel(), which no scope shields.
    with anyio.CancelScope(shield=True):
        while not task.done():
            try:
                await asyncio.shield(task)
            except asyncio.CancelledError:
                # Still cancelled, still waiting: the started call must end before we leave.
                # The first CancelledError is re-raised by the caller once the call is over.
                continue
            except BaseException:  # the outcome is read (and dropped) by the caller
                return


async def wait_done(future: concurrent.futures.Future[Any]) -> None:
    """Wait until ``future`` is done (result, exception or cancelled); do not read it.

    Holds no worker thread. Cancelling the waiter does not affect ``future``.
    """
    if future.done():
        await anyio.lowlevel.checkpoint()
        return
    if _async_library() == "trio":
        await _wait_done_trio(future)
    else:
        await _wait_done_asyncio(future)


async def _wait_done_asyncio(future: concurrent.futures.Future[Any]) -> None:
    loop = asyncio.get_running_loop()
    waiter: asyncio.Future[None] = loop.create_future()

    def wake(_: object) -> None:
        if not waiter.done():
            waiter.set_result(None)

    def on_done(_: concurrent.futures.Future[Any]) -> None:
        # RuntimeError: the loop closed while its task was waiting, so there is nobody to wake.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(wake, None)

    future.add_done_callback(on_done)
    await waiter


async def _wait_done_trio(future: concurrent.futures.Future[Any]) -> None:
    trio = importlib.import_module("trio")  # only reached while trio is running
    token = trio.lowlevel.current_trio_token()
    event = trio.Event()

    def on_done(_: concurrent.futures.Future[Any]) -> None:
        with contextlib.suppress(trio.RunFinishedError):
            token.run_sync_soon(event.set)

    future.add_done_callback(on_done)
    await event.wait()


class Cancellation:
    """A cancellation request for a running guest call, settable from any thread."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._listeners: list[Callable[[], None]] = []

    @property
    def cancelled(self) -> bool:
        """True once :meth:`cancel` was called."""
        return self._event.is_set()

    def cancel(self) -> None:
        """Request cancellation; listeners run once, in this thread."""
        with self._lock:
            if self._event.is_set():
                return
            self._event.set()
            listeners, self._listeners = self._listeners, []
        for listener in listeners:
            listener()

    def listen(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` on cancellation (at once if already cancelled)."""
        with self._lock:
            if not self._event.is_set():
                self._listeners.append(listener)
                return
        listener()


async def arun_cancellable(fn: Callable[[Cancellation], T]) -> T:
    """Run the blocking ``fn(cancellation)`` in a thread of its own and await its result.

    If the awaiting task is cancelled, ``cancellation`` is set (so a guest call inside ``fn``
    stops its guest), the task waits until ``fn`` has returned or raised, and then the
    cancellation propagates. Works under asyncio and trio.
    """
    cancellation = Cancellation()
    future: concurrent.futures.Future[T] = concurrent.futures.Future()

    def work() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(fn(cancellation))
        except BaseException as exc:
            future.set_exception(exc)

    threading.Thread(target=work, name="lizard-core-call", daemon=True).start()
    try:
        await wait_done(future)
    except BaseException:
        cancellation.cancel()
        await wait_done_uncancellable(future)
        if not future.cancelled() and future.exception() is not None:
            _log.debug("cancelled call ended with %r", future.exception())
        raise
    return future.result()


async def wait_done_uncancellable(future: concurrent.futures.Future[Any]) -> None:
    """Like :func:`wait_done`, but cancelling the waiter does not end the wait."""
    with anyio.CancelScope(shield=True):
        while not future.done():
            try:
                await wait_done(future)
            except anyio.get_cancelled_exc_class():
                continue  # a native asyncio cancel: keep waiting; the caller re-raises


def loop_callback(callback: Callable[[T], object] | None) -> Callable[[T], None] | None:
    """Wrap ``callback`` so that a worker thread runs it in the calling event loop's thread.

    Call from async code. The worker waits for each call, so output callbacks stay in order
    and apply backpressure; once the loop is gone, calls are dropped.
    """
    if callback is None:
        return None
    token = anyio.lowlevel.current_token()

    def call(value: T) -> None:
        with contextlib.suppress(anyio.RunFinishedError):
            anyio.from_thread.run_sync(callback, value, token=token)

    return call
