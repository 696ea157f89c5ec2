from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import threading
import time

import anyio
import pytest
import sniffio
import trio

from lizard_core._bridge import run_blocking, wait_done

request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="-")


class BlockingCall:
    """A blocking call that starts, waits to be released, and records that it finished."""

    def __init__(self, result: object = "done") -> None:
        self.started = threading.Event()
        self.release = threading.Event()
        self.finished = threading.Event()
        self.result = result

    def __call__(self) -> object:
        self.started.set()
        assert self.release.wait(10), "never released"
        self.finished.set()
        if isinstance(self.result, BaseException):
            raise self.result
        return self.result


# ── asyncio ──────────────────────────────────────────────────────────────


async def test_returns_the_result_from_a_worker_thread() -> None:
    def where(a: int, *, b: int) -> tuple[int, str]:
        return a + b, threading.current_thread().name

    value, thread = await run_blocking(where, 1, b=2)
    assert value == 3
    assert thread != threading.current_thread().name


async def test_raises_the_calls_exception() -> None:
    error = ValueError("from the thread")

    def fail() -> None:
        raise error

    with pytest.raises(ValueError, match="from the thread") as caught:
        await run_blocking(fail)
    assert caught.value is error


async def test_context_variables_reach_the_thread() -> None:
    request_id.set("req-42")
    assert await run_blocking(request_id.get) == "req-42"


async def test_cancellation_waits_for_the_started_call_then_propagates() -> None:
    call = BlockingCall()
    task = asyncio.create_task(run_blocking(call))
    assert await asyncio.to_thread(call.started.wait, 5)
    task.cancel()
    await asyncio.sleep(0.2)
    assert not task.done(), "the cancelled task must wait for the call already running"
    call.release.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert call.finished.is_set()


async def test_repeated_cancellation_still_waits() -> None:
    call = BlockingCall()
    task = asyncio.create_task(run_blocking(call))
    assert await asyncio.to_thread(call.started.wait, 5)
    for _ in range(5):
        task.cancel()
        await asyncio.sleep(0.02)
    assert not task.done()
    call.release.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert call.finished.is_set()


async def test_cancellation_wins_over_the_calls_error() -> None:
    call = BlockingCall(result=RuntimeError("late failure"))
    task = asyncio.create_task(run_blocking(call))
    assert await asyncio.to_thread(call.started.wait, 5)
    task.cancel()
    call.release.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert call.finished.is_set()


async def test_asyncio_timeout_fires_after_the_call_ends() -> None:
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.05):
            await run_blocking(time.sleep, 0.4)
    assert time.monotonic() - started >= 0.35


async def test_anyio_cancel_scope_under_asyncio_waits_too() -> None:
    reached_after = False
    started = time.monotonic()
    with anyio.move_on_after(0.05) as scope:
        await run_blocking(time.sleep, 0.4)
        reached_after = True
    assert scope.cancelled_caught
    assert not reached_after
    assert time.monotonic() - started >= 0.35


async def test_waiting_out_a_cancelled_call_costs_no_cpu() -> None:
    # An anyio scope re-delivers its cancellation at every checkpoint of the task; a wait that
    # is not shielded from it spins on the CPU until the call ends.
    cpu, wall = time.process_time(), time.monotonic()
    with anyio.move_on_after(0.1):
        await run_blocking(time.sleep, 1.5)
    cpu, wall = time.process_time() - cpu, time.monotonic() - wall
    assert wall >= 1.4
    assert cpu < 0.5, f"{cpu:.2f} s of CPU while waiting {wall:.2f} s for a sleeping thread"


async def test_a_task_cancelled_before_it_runs_never_starts_the_call() -> None:
    call = BlockingCall()
    task = asyncio.create_task(run_blocking(call))
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not call.started.is_set()


async def test_many_concurrent_calls_run_in_parallel() -> None:
    started = time.monotonic()
    await asyncio.gather(*(run_blocking(time.sleep, 0.3) for _ in range(20)))
    assert time.monotonic() - started < 3.0  # one after another would take 6 s


async def test_wait_done_returns_when_another_thread_completes_the_future() -> None:
    future: concurrent.futures.Future[int] = concurrent.futures.Future()
    threading.Timer(0.1, future.set_result, args=(5,)).start()
    await asyncio.wait_for(wait_done(future), 5)
    assert future.result() == 5


async def test_wait_done_on_failed_and_cancelled_futures_does_not_raise() -> None:
    failed: concurrent.futures.Future[int] = concurrent.futures.Future()
    failed.set_exception(KeyError("x"))
    await wait_done(failed)
    cancelled: concurrent.futures.Future[int] = concurrent.futures.Future()
    threading.Timer(0.05, cancelled.cancel).start()
    await asyncio.wait_for(wait_done(cancelled), 5)
    assert cancelled.cancelled()


async def test_cancelling_a_waiter_leaves_the_future_alone() -> None:
    future: concurrent.futures.Future[int] = concurrent.futures.Future()
    waiter = asyncio.create_task(wait_done(future))
    await asyncio.sleep(0.05)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert not future.done()
    assert future.set_running_or_notify_cancel()
    future.set_result(1)


# ── trio ─────────────────────────────────────────────────────────────────


def test_trio_returns_results_and_errors() -> None:
    async def main() -> None:
        assert await run_blocking(lambda: threading.current_thread().name) != "MainThread"
        with pytest.raises(ZeroDivisionError):
            await run_blocking(lambda: 1 / 0)

    trio.run(main)


def test_trio_cancellation_waits_for_the_started_call_then_propagates() -> None:
    call = BlockingCall()
    outcome: dict[str, object] = {}

    async def main() -> None:
        threading.Timer(0.3, call.release.set).start()
        started = trio.current_time()
        with trio.move_on_after(0.05) as scope:
            await run_blocking(call)
            outcome["reached_after"] = True
        outcome["cancelled"] = scope.cancelled_caught
        outcome["waited"] = trio.current_time() - started

    trio.run(main)
    assert call.finished.is_set()
    assert outcome["cancelled"] is True
    assert "reached_after" not in outcome
    assert isinstance(outcome["waited"], float)
    assert outcome["waited"] >= 0.25


def test_trio_wait_done() -> None:
    future: concurrent.futures.Future[str] = concurrent.futures.Future()

    async def main() -> None:
        threading.Timer(0.1, future.set_result, args=("ok",)).start()
        with trio.fail_after(5):
            await wait_done(future)

    trio.run(main)
    assert future.result() == "ok"


# ── unsupported contexts fail at once ────────────────────────────────────


def test_without_an_event_loop_it_fails_with_a_clear_message() -> None:
    call = BlockingCall()
    coroutine = run_blocking(call)
    with pytest.raises(RuntimeError, match="asyncio or trio"):
        coroutine.send(None)
    coroutine.close()
    assert not call.started.is_set()


async def test_an_unknown_async_library_fails_with_a_clear_message() -> None:
    call = BlockingCall()
    token = sniffio.current_async_library_cvar.set("curio")
    try:
        with pytest.raises(RuntimeError, match="'curio'"):
            await run_blocking(call)
    finally:
        sniffio.current_async_library_cvar.reset(token)
    assert not call.started.is_set()
