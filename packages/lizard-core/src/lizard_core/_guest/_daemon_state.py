"""The kernel daemon's process state: its identity, the running cell, and interrupts.

Part of the kernel daemon program (bundled into it by ``lizard_core._guest.source``).

- ``KERNEL_ID`` names this daemon process for the host; ``STATE`` is the one cell running.
- SIGINT reaches the main thread only (every other daemon thread blocks it), and interrupts a
  cell only while one runs (:func:`on_sigint`); :class:`Watchdog` sends it at the cell's time.
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # see kernel_daemon: signal costs its enums
import _socket
import binascii
import os
import select
import threading
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: never evaluated, so the daemon runs on Python 3.8
    from typing import Any, Dict, Optional, Tuple

    Bundle = Dict[str, str]

HERE = os.path.abspath(__file__)

DAEMON_PID = os.getpid()
KERNEL_ID = binascii.hexlify(os.urandom(8)).decode()
_main_thread_id = threading.main_thread().ident or 0


def block_sigint() -> None:
    """Block SIGINT in the calling daemon thread (each calls this first).

    A SIGINT sent to the process must reach the main thread, where it interrupts a blocking call
    (sleep, read) and raises KeyboardInterrupt.
    """
    try:
        _signal.pthread_sigmask(_signal.SIG_BLOCK, {_signal.SIGINT})
    except (AttributeError, OSError, ValueError):
        pass


def client_gone(conn: _socket.socket) -> bool:
    """True when the client closed its end (it never sends after the request)."""
    try:
        r, _, _ = select.select([conn], [], [], 0)
        if r:
            return conn.recv(1, _socket.MSG_PEEK) == b""
    except OSError:
        return True
    return False


class Watchdog:
    """Interrupts the running cell when its time is up, or when its client went away.

    One thread for the daemon's life, armed for each cell and disarmed after it, so a cell costs
    no thread start or join (each is a scheduling round trip on a busy machine).
    """

    def __init__(self) -> None:
        self.cond = threading.Condition(threading.Lock())
        self.armed: Optional[Tuple[Optional[float], _socket.socket]] = (
            None  # (deadline or None, conn) of the running cell
        )
        self.timed_out = False
        self.client_gone = False
        self.thread = threading.Thread(target=self._run, name="lizard-kernel-watchdog", daemon=True)
        self.thread.start()

    def arm(self, timeout: Optional[float], conn: _socket.socket) -> None:
        with self.cond:
            self.timed_out = False
            self.client_gone = False
            deadline = time.monotonic() + timeout if timeout else None
            self.armed = (deadline, conn)
            self.cond.notify_all()

    def disarm(self) -> None:
        with self.cond:
            self.armed = None

    def _run(self) -> None:
        block_sigint()
        while True:
            with self.cond:
                while self.armed is None:
                    self.cond.wait()
                armed = self.armed
                deadline, conn = armed
                next_signal = deadline
                while self.armed is armed:
                    self.cond.wait(0.1)
                    if self.armed is not armed:
                        break
                    now = time.monotonic()
                    if not self.client_gone and client_gone(conn):
                        self.client_gone = True
                        next_signal = now
                    if next_signal is not None and now >= next_signal:
                        if deadline is not None and now >= deadline:
                            self.timed_out = True
                        # Sent under the lock, so never after disarm(); a signal that lands
                        # after the cell ended is dropped by on_sigint.
                        try:
                            _signal.pthread_kill(_main_thread_id, _signal.SIGINT)
                        except (OSError, ValueError):
                            pass
                        # Again every half second: a bare ``except:`` in the cell swallows one.
                        next_signal = now + 0.5


class CellState:
    """What the signal handler needs to know about the main thread."""

    def __init__(self) -> None:
        self.executing = False
        self.starting = False  # the cell frame is sent, the cell's code not yet running
        self.deferred = False
        self.count = 0


STATE = CellState()


def on_sigint(signum: int, frame: Any) -> None:
    """Raise KeyboardInterrupt in the running cell, never in the daemon's own code.

    Between cells the signal is dropped; from the cell frame on (the host may interrupt as soon
    as it has it) it is the cell's. While the daemon's code runs for the cell (framing
    output, formatting results) it is deferred to the next safe point (``interrupt_point``), so a
    frame or the namespace bookkeeping is never left half done.
    """
    if not STATE.executing:
        # Between cells it is dropped; once the host has the cell frame it is the cell's.
        STATE.deferred = STATE.deferred or STATE.starting
        return
    if frame is not None and frame.f_code.co_filename == HERE:
        STATE.deferred = True
        return
    raise KeyboardInterrupt


def interrupt_point() -> None:
    """Deliver a deferred interrupt; called where the daemon hands control back to the cell."""
    if STATE.deferred and STATE.executing:
        STATE.deferred = False
        raise KeyboardInterrupt
