"""Stopping a running guest: what the host knows of its processes, and the signals it sends.

- A guest is asked to stop with ``SIGTERM`` (when graceful) and killed with ``SIGKILL`` after
  :data:`CANCEL_GRACE_S`, each by a ``signal`` request the caller runs as a second exec.
- ``SIGKILL`` also names the process groups the guest reported, and only those.
- A guest that never sent its pid is stopped by having the platform kill the whole exec.
- While stopping, the call's stream is still read, so a pid frame arriving late is used.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import Any, Final

from lizard_core._guest_lines import is_pid
from lizard_core._wire import AgentFrame
from lizard_core.errors import translated

__all__ = ["CANCEL_GRACE_S", "GuestProcesses", "GuestStopper"]

CANCEL_GRACE_S: Final = 3.0
"""After asking a guest to stop, wait this long before killing it, and as long again after."""
_MAX_GROUPS: Final = 64
_SIGTERM: Final = 15
_SIGKILL: Final = 9


class GuestProcesses:
    """What the host knows of a guest's processes: its pid, the exec's pid, its process groups."""

    def __init__(self) -> None:
        self.guest_pid: int | None = None
        self.exec_pid: int | None = None
        self.groups: set[int] = set()

    def note_pid(self, pid: object) -> bool:
        """Record the guest's pid from its first valid ``pid`` frame; False for any other."""
        if self.guest_pid is None and is_pid(pid):
            self.guest_pid = pid
            return True
        return False

    def note_group(self, pg: object) -> None:
        """Record a process group a frame names (a bounded number of them)."""
        if is_pid(pg) and len(self.groups) < _MAX_GROUPS:
            self.groups.add(pg)


class GuestStopper:
    """Stops one call's guest: asked first (``SIGTERM``), then killed (``SIGKILL``).

    ``drain_until(condition, seconds)`` reads the call's stream until ``condition()`` holds
    (True) or the stream ended (False); ``send`` runs a ``signal`` request as its own exec.
    """

    def __init__(
        self,
        sandbox: Any,
        call_id: str,
        processes: GuestProcesses,
        drain_until: Callable[[Callable[[], bool], float], bool],
        send: Callable[[Mapping[str, Any]], None],
    ) -> None:
        self.sandbox = sandbox
        self.sandbox_id = str(sandbox.sandbox_id)
        self.call_id = call_id
        self.processes = processes
        self.drain_until = drain_until
        self.send = send

    def stop(self, *, graceful: bool) -> None:
        """``SIGTERM`` (when ``graceful``), then ``SIGKILL``, each given :data:`CANCEL_GRACE_S`."""
        processes = self.processes
        # The pid frame is the first line the guest writes; give it a moment to arrive.
        if not self.drain_until(lambda: processes.guest_pid is not None, CANCEL_GRACE_S):
            return
        if processes.guest_pid is not None:
            if graceful:
                self._signal(_SIGTERM)
                if not self.drain_until(lambda: False, CANCEL_GRACE_S):
                    return
            self._signal(_SIGKILL)
        elif processes.exec_pid is not None:
            # No word from the guest at all: have the platform kill the whole exec.
            with contextlib.suppress(Exception), translated(sandbox_id=self.sandbox_id):
                self.sandbox.process.kill(processes.exec_pid, "SIGKILL")
        self.drain_until(lambda: False, CANCEL_GRACE_S)

    def kill_unobserved(self) -> None:
        """``SIGKILL`` a guest whose stream is gone; a failure propagates to the caller."""
        if self.processes.guest_pid is not None:
            self._signal(_SIGKILL)
        elif self.processes.exec_pid is not None:
            self.sandbox.process.kill(self.processes.exec_pid, "SIGKILL")

    def _signal(self, signum: int) -> None:
        request: dict[str, Any] = {
            "op": "signal",
            "pid": self.processes.guest_pid,
            "cid": self.call_id,
            "sig": signum,
        }
        if signum == _SIGKILL:
            request[AgentFrame.PROCESS_GROUP] = sorted(self.processes.groups)
        self.send(request)
