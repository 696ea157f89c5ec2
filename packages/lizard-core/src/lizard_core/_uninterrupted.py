"""Requests that make something billable, waited for through Ctrl-C.

A ``KeyboardInterrupt`` raised into the HTTP read of a fork or a snapshot would lose the only
answer that names what the platform made, which would then bill on unseen. :func:`uninterrupted`
sends the request from a worker thread and waits for it whatever interrupts the waiting
thread; the caller gets the outcome and the interrupt, cleans up, then raises the interrupt.
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Callable
from typing import TypeVar

__all__ = ["uninterrupted"]

T = TypeVar("T")


def uninterrupted(
    request: Callable[[], T], *, name: str
) -> tuple[concurrent.futures.Future[T], BaseException | None]:
    """Run ``request`` in a thread called ``name``; its outcome and any interrupt meanwhile."""
    answer: concurrent.futures.Future[T] = concurrent.futures.Future()

    def send() -> None:
        try:
            answer.set_result(request())
        except BaseException as exc:  # handed to the caller through the future
            answer.set_exception(exc)

    threading.Thread(target=send, name=name, daemon=True).start()
    interrupted: BaseException | None = None
    while True:
        try:
            concurrent.futures.wait([answer])
            return answer, interrupted
        except BaseException as exc:  # KeyboardInterrupt: the answer is waited for all the same
            interrupted = interrupted or exc
