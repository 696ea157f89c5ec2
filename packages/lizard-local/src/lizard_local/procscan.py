"""Find and kill host processes by the environment marker every sandbox process carries.

Every process lizard-local starts has ``LIZARD_EMU_SANDBOX=<sandbox id>`` and
``LIZARD_EMU_INSTANCE=<server instance>`` in its environment. These helpers read ``/proc`` (Linux)
to find them: the server uses them as a last net after a sandbox is stopped, and the pytest plugin
uses them to prove that nothing the emulator started outlives the test session.
"""

from __future__ import annotations

import os
import signal
import time

__all__ = ["children_of", "find_marked", "kill_marked"]


def _pids() -> list[int]:
    try:
        return [int(n) for n in os.listdir("/proc") if n.isdigit()]
    except OSError:
        return []


def children_of(parent: int) -> list[int]:
    """Pids whose parent is ``parent``."""
    out = []
    for pid in _pids():
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                data = f.read()
        except OSError:
            continue
        fields = data[data.rfind(b")") + 2 :].split()
        if int(fields[1]) == parent:
            out.append(pid)
    return out


def find_marked(marker: bytes) -> list[int]:
    """Pids whose environment contains the exact entry ``marker`` (``b"NAME=value"``)."""
    me = os.getpid()
    out = []
    for pid in _pids():
        if pid == me:
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read()
        except OSError:
            continue
        if marker in env.split(b"\0"):
            out.append(pid)
    return out


def kill_marked(marker: bytes, rounds: int = 50) -> int:
    """SIGKILL every process carrying ``marker`` until none is left; return how many were hit."""
    hit = 0
    empty_scans = 0
    for _ in range(rounds):
        pids = find_marked(marker)
        if not pids:
            # A process in the middle of exec reads an empty environ for a moment: only two
            # empty scans in a row mean none is left.
            empty_scans += 1
            if empty_scans == 2:
                break
            time.sleep(0.01)
            continue
        empty_scans = 0
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                hit += 1
            except OSError:
                pass
        time.sleep(0.01)
    return hit
