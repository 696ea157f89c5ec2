"""The executor's kernels: one per ADK session, bounded in number and in idle time.

Each ADK session (``execution_id``) gets a :class:`~lizard_core.Kernel` of its own in the one
sandbox. :class:`KernelPool` keeps at most ``max_kernels`` of them: at every block it stops the
ones idle longer than ``idle_s``, then the least recently used idle ones past the maximum (a
kernel whose block is running is never stopped, so the maximum is passed only while that many
blocks run at once). A session whose kernel was stopped gets a fresh one, and a notice saying
its state is gone. Blocks of one session run one at a time; blocks of different sessions run
at once.
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from lizard_core import Kernel
from lizard_core.errors import LizardIntegrationError
from lizard_core.session import Session

__all__ = ["KernelPool", "Slot"]

_REMEMBERED: Final = 4096  # stopped sessions remembered, to tell them their state is gone


@dataclass
class Slot:
    """One session's kernel, and who is using it."""

    kernel: Kernel
    lock: threading.Lock = field(default_factory=threading.Lock)
    last_used: float = 0.0
    users: int = 0
    blocks: int = 0
    """Blocks run in this kernel so far."""


class KernelPool:
    """At most ``max_kernels`` kernels in ``session``'s sandbox; see the module docstring."""

    def __init__(
        self,
        session: Session,
        cwd: str,
        *,
        max_kernels: int,
        idle_s: float | None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._session = session
        self._cwd = cwd
        self._max = max_kernels
        self._idle_s = idle_s
        self._clock = clock
        self._lock = threading.Lock()
        self._slots: OrderedDict[str | None, Slot] = OrderedDict()
        self._stopped: OrderedDict[str | None, str] = OrderedDict()

    def __len__(self) -> int:
        with self._lock:
            return len(self._slots)

    def acquire(self, key: str | None) -> tuple[Slot, str | None]:
        """The kernel for ``key``, locked for one block, and a notice if its state was dropped."""
        with self._lock:
            now = self._clock()
            stop = self._make_room(now, key)
            slot = self._slots.get(key)
            notice = None
            if slot is None:
                reason = self._stopped.pop(key, None)
                if reason is not None:
                    notice = (
                        f"This session's Python kernel was stopped {reason}; its variables, "
                        "imports and functions are lost."
                    )
                slot = self._slots[key] = Slot(self._new_kernel(key))
            self._slots.move_to_end(key)
            slot.users += 1
            slot.last_used = now
        for kernel in stop:
            with contextlib.suppress(LizardIntegrationError):  # its sandbox may be gone already
                kernel.close()
        slot.lock.acquire()
        return slot, notice

    def release(self, slot: Slot) -> None:
        """Give back a slot :meth:`acquire` returned."""
        with self._lock:
            slot.users -= 1
            slot.blocks += 1
            slot.last_used = self._clock()
        slot.lock.release()

    def _new_kernel(self, key: str | None) -> Kernel:
        # Kernel names are short and plain; an ADK session id need not be.
        digest = hashlib.sha256((key or "").encode()).hexdigest()[:24]
        name = "adk" if key is None else f"adk-{digest}"
        return Kernel(self._session, name=name, cwd=self._cwd)

    def _make_room(self, now: float, key: str | None) -> list[Kernel]:
        """Take out the kernels to stop (called under the lock); they are closed after it."""
        stop: list[Kernel] = []
        idle = [k for k, s in self._slots.items() if k != key and s.users == 0]
        if self._idle_s is not None:
            for k in idle:
                if now - self._slots[k].last_used >= self._idle_s:
                    stop.append(self._forget(k, f"after {self._idle_s:g} s without use"))
        room = self._max - (0 if key in self._slots else 1)
        for k in [k for k in idle if k in self._slots]:  # least recently used first
            if len(self._slots) <= room:
                break
            stop.append(self._forget(k, f"to make room for other sessions (at most {self._max})"))
        return stop

    def _forget(self, key: str | None, reason: str) -> Kernel:
        slot = self._slots.pop(key)
        self._stopped[key] = reason
        while len(self._stopped) > _REMEMBERED:
            self._stopped.popitem(last=False)
        return slot.kernel
