"""Live output of a running operation: its chunks as they arrive, then its outcome.

:func:`lizard_core.commands.stream_command` and :meth:`lizard_core.kernel.Kernel.stream` return
an :class:`OutputStream`. What holds (tested against lizard-local in ``tests/test_streaming.py``):

- **Nothing runs until iterated.** Making a stream checks its arguments (TypeError /
  ValueError) and makes no request; the first ``next()`` or ``await anext()`` starts the
  operation (creating the sandbox if it is the session's first use). A stream runs once, and
  is read by one reader at a time: a second concurrent ``next()`` raises RuntimeError.
- **Chunks as they arrive.** Each :class:`OutputChunk` is yielded as soon as the guest sent it
  (output the guest spilled to files comes last), stdout and stderr in the order received.
- **The outcome.** When the operation ends the iteration ends, and :attr:`OutputStream.result`
  holds what the blocking call would have returned; what that call would have raised
  (:class:`~lizard_core.errors.CommandTimeoutError` with its partial output, the session's
  errors, ...) is raised by the ``next()`` that would have ended the iteration.
- **Sync and async.** ``for chunk in stream`` blocks; ``async for chunk in stream`` waits in the
  event loop (asyncio or trio) without holding a worker thread. The operation itself runs in a
  thread of its own.
- **Stopping.** Cancelling the consuming task, Ctrl-C while iterating, :meth:`OutputStream.close`
  / :meth:`OutputStream.aclose` (and leaving ``with`` / ``async with``) stop the operation as
  cancelling :func:`~lizard_core.commands.arun_command` does (the command's process group, or
  the kernel cell's interrupt) and wait for it to end; a cancellation then propagates. A stream
  dropped unfinished asks its operation to stop.
- **Bounded.** Chunks wait for a slow reader in memory, never stalling the operation; the
  operation's own output limit (``output_limit``, ``max_output_bytes``) bounds them. Output of
  one stream that waits is joined into one chunk (a slow reader gets fewer, larger chunks).
"""

from __future__ import annotations

import collections
import concurrent.futures
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Generic, Literal, TypeVar

import anyio.lowlevel

from lizard_core._bridge import Cancellation, wait_done, wait_done_uncancellable
from lizard_core.session import Session

__all__ = ["OutputChunk", "OutputStream", "StreamName"]

T = TypeVar("T")

StreamName = Literal["stdout", "stderr"]
"""Which output stream a chunk came from."""

Emit = Callable[[StreamName, bytes], None]
"""How an operation hands a chunk to its stream (from the operation's thread)."""
Work = Callable[[Any, Cancellation, Emit], T]
"""An operation: ``work(sandbox, cancellation, emit)`` runs it (blocking) and returns its
outcome."""

_STOP_WAIT_S: Final = 120.0
"""How long :meth:`OutputStream.close` waits for its stopped operation (whose own deadlines end
it sooner)."""


@dataclass(frozen=True)
class OutputChunk:
    """One piece of output, as it arrived."""

    stream: StreamName
    """``stdout`` or ``stderr``."""
    data: bytes
    """The exact bytes (a command's may end inside a UTF-8 character; a kernel cell's are whole
    characters)."""


class _Channel(Generic[T]):
    """Chunks from the operation's thread to the consumer, then the outcome.

    Kept apart from :class:`OutputStream` so that the running thread holds no reference to the
    stream, which can then be dropped (and stop its operation) while the operation runs.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        # Pending output as [stream, bytes]; a piece of the same stream as the last pending one
        # joins it, so a slow reader holds a few large pieces, not one object per guest frame.
        self.chunks: collections.deque[tuple[StreamName, bytearray]] = collections.deque()
        self.outcome: concurrent.futures.Future[T] = concurrent.futures.Future()
        self.wake: concurrent.futures.Future[None] = concurrent.futures.Future()

    def run(self, work: Work[T], sandbox: Any, cancel: Cancellation) -> None:
        try:
            result = work(sandbox, cancel, self.emit)
        except BaseException as exc:
            self.outcome.set_exception(exc)
        else:
            self.outcome.set_result(result)
        self.notify()

    def emit(self, stream: StreamName, data: bytes) -> None:
        if data:
            with self.lock:
                if self.chunks and self.chunks[-1][0] == stream:
                    self.chunks[-1][1].extend(data)
                else:
                    self.chunks.append((stream, bytearray(data)))
            self.notify()

    def notify(self) -> None:
        with self.lock:
            if not self.wake.done():
                self.wake.set_result(None)

    def poll(self) -> OutputChunk | concurrent.futures.Future[None] | None:
        """The next chunk, else a future to wait on, else None once the outcome is in."""
        with self.lock:
            if self.chunks:
                stream, data = self.chunks.popleft()
                return OutputChunk(stream, bytes(data))
            if self.outcome.done():
                return None
            if self.wake.done():
                self.wake = concurrent.futures.Future()
            return self.wake


class OutputStream(Generic[T]):
    """Iterate (sync or async) over an operation's output chunks, then read its result.

    Made by :func:`lizard_core.commands.stream_command` and
    :meth:`lizard_core.kernel.Kernel.stream`; see the module docstring for the contract.
    """

    def __init__(self, session: Session, work: Work[T]) -> None:
        self._session = session
        self._work: Work[T] | None = work
        self._cancel = Cancellation()
        self._channel: _Channel[T] = _Channel()
        self._outcome = self._channel.outcome
        self._started = False
        self._finished = False  # the consumer has seen the end
        self._reading = threading.Lock()  # held by the one next() or anext() under way

    def _start(self, sandbox: Any) -> None:
        work, self._work = self._work, None
        assert work is not None
        self._started = True
        threading.Thread(
            target=self._channel.run,
            args=(work, sandbox, self._cancel),
            name="lizard-core-stream",
            daemon=True,
        ).start()

    def _poll(self) -> OutputChunk | concurrent.futures.Future[None] | None:
        return self._channel.poll()

    def _end(self) -> T:
        self._finished = True
        return self._outcome.result()  # raises what the operation raised

    @property
    def result(self) -> T:
        """The operation's outcome, once the iteration has ended (else RuntimeError)."""
        if not self._finished:
            raise RuntimeError("the stream has not been read to its end")
        if not self._outcome.done():
            raise RuntimeError("the stream was closed before its operation ended")
        return self._outcome.result()

    def _claim(self) -> None:
        if not self._reading.acquire(blocking=False):
            raise RuntimeError("the stream is already being read")

    def __iter__(self) -> OutputStream[T]:
        return self

    def __next__(self) -> OutputChunk:
        if self._finished:
            raise StopIteration
        self._claim()
        try:
            if not self._started:
                self._start(self._session.sandbox())
            while True:
                item = self._poll()
                if isinstance(item, OutputChunk):
                    return item
                if item is None:
                    break
                item.result()
        except BaseException:
            self.close()
            raise
        finally:
            self._reading.release()
        self._end()
        raise StopIteration

    def __aiter__(self) -> OutputStream[T]:
        return self

    async def __anext__(self) -> OutputChunk:
        if self._finished:
            raise StopAsyncIteration
        self._claim()
        try:
            if not self._started:
                self._start(await self._session.asandbox())
            while True:
                item = self._poll()
                if isinstance(item, OutputChunk):
                    await anyio.lowlevel.checkpoint()
                    return item
                if item is None:
                    break
                await wait_done(item)
        except BaseException:
            await self.aclose()
            raise
        finally:
            self._reading.release()
        self._end()
        raise StopAsyncIteration

    def close(self) -> None:
        """Stop the operation if it still runs and wait for it to end (blocking)."""
        if self._started and not self._outcome.done():
            self._cancel.cancel()
            concurrent.futures.wait([self._outcome], timeout=_STOP_WAIT_S)
        self._finished = True

    async def aclose(self) -> None:
        """Async :meth:`close`; the wait is shielded, so a cancelled task still waits."""
        if self._started and not self._outcome.done():
            self._cancel.cancel()
            await wait_done_uncancellable(self._outcome)
        self._finished = True

    def __enter__(self) -> OutputStream[T]:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    async def __aenter__(self) -> OutputStream[T]:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    def __del__(self) -> None:
        # Dropped unfinished (a loop left with break): ask the operation to stop, without waiting.
        if self._started and not self._outcome.done():
            self._cancel.cancel()
