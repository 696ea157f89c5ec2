"""The frames the guest programs send, named once on the host side that reads them.

Both guest programs answer with one JSON object per stdout line, typed by its ``t`` key.
Contract:

- Every frame kind and every frame key the host reads is named here, in the namespace of the
  protocol it belongs to: :class:`GuestFrame` for what every guest program sends (through
  ``run_guest``), :class:`AgentFrame` and :class:`AgentEnd` for the command and file agent
  (``_guest/agent.py``), :class:`KernelFrame` and :class:`KernelEnd` for the kernel client and
  daemon (``_guest/kernel_client.py``, ``_guest/kernel_daemon.py``). Host modules read frames only
  through these names.
- The values are what travels; the agent keeps short keys because its frames are the hot path.
  ``tests/test_wire.py`` parses the guest programs and holds them to these names.
- Budgets say whose they are: :data:`AGENT_STREAM_BUDGET` for a command's inline output,
  :data:`KERNEL_STREAM_BUDGET` for a kernel call's inline frames.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "AGENT_STREAM_BUDGET",
    "KERNEL_STREAM_BUDGET",
    "AgentEnd",
    "AgentFrame",
    "GuestFrame",
    "KernelEnd",
    "KernelFrame",
]

AGENT_STREAM_BUDGET: Final = 448 * 1024
"""Bytes of frames (both streams' output, deflated and base64-encoded) a command may send inside
the exec stream before the rest spills to files. Below the platform's 512 KiB cap on one exec
stream, leaving room for the end frame and heartbeats."""
KERNEL_STREAM_BUDGET: Final = 352 * 1024
"""Bytes of frames a kernel call streams before the rest goes to a file (fetched with one
request). Below the same cap, with room for heartbeats and the kernel client's own frames."""


class GuestFrame:
    """What every guest program sends, and the keys ``run_guest`` adds to every request."""

    TYPE: Final = "t"
    HEARTBEAT: Final = "hb"
    HEARTBEAT_EVERY: Final = "hb"
    """Request key: seconds of silence after which the guest sends a heartbeat."""
    PID: Final = "pid"
    """Kind of the first frame, and its key: the guest's own pid."""
    END: Final = "end"
    CLEANUP: Final = "rm"
    """Request key: job folders the guest removes before it answers."""


class AgentFrame:
    """Frame kinds and keys of the command and file agent."""

    START: Final = "start"
    """Kind of the frame announcing a process group (its key :attr:`PROCESS_GROUP`)."""
    PROCESS_GROUP: Final = "pg"
    """A frame key announcing a process group a command started (and the ``signal`` request's
    key listing the groups to kill when a call is stopped)."""

    OUTPUT: Final = "o"
    OUTPUT_ZLIB: Final = "z"
    FILE_DATA: Final = "d"
    ENTRIES: Final = "e"
    STREAM: Final = "s"
    """1 for stdout, 2 for stderr."""
    DATA: Final = "d"
    """Base64 payload of an output or file-data frame."""


class AgentEnd:
    """Keys of the agent's ``end`` frame."""

    ERRNO: Final = "err"
    """``[errno, strerror, filename]`` of a failed path operation."""
    BUG: Final = "bug"
    """The agent itself failed."""

    EXIT_CODE: Final = "rc"
    COUNT: Final = "n"
    """Bytes per stream of a command; bytes or entries of a file operation."""
    SPILL: Final = "sp"
    TIMED_OUT: Final = "to"
    OUTPUT_LIMITED: Final = "ol"
    CWD: Final = "cwd"
    START_ERRNO: Final = "se"
    ENTRY: Final = "e"
    ZLIB: Final = "z"
    PART: Final = "part"
    SIZE: Final = "size"
    IDENTITY: Final = "id"
    REFUSED: Final = "refused"
    VALUE: Final = "v"


class KernelFrame:
    """Frame kinds and keys of a kernel call (client and daemon)."""

    OUTPUT: Final = "o"
    CUT: Final = "cut"
    RESULT: Final = "res"
    RESULT_DATA: Final = "rd"
    ERROR_TEXT: Final = "et"
    CELL: Final = "cell"
    SPAWNED: Final = "spawned"
    STREAM: Final = "s"
    DATA: Final = "d"
    LIMIT: Final = "limit"
    INDEX: Final = "i"
    MAIN: Final = "main"
    OMITTED: Final = "omit"
    MIME: Final = "m"
    FIELD: Final = "f"
    KERNEL_ID: Final = "kernel"
    COUNT: Final = "n"
    PID: Final = "pid"
    LOST: Final = "lost"


class KernelEnd:
    """Keys of a kernel call's ``end`` frame, and of its ``error`` object."""

    TIMED_OUT: Final = "timed_out"
    STATE_LOST: Final = "state_lost"
    NEED_SOURCE: Final = "need_source"
    RUNNING: Final = "running"
    CLIENT_GONE: Final = "client_gone"
    COUNT: Final = "n"
    KERNEL_ID: Final = "kernel"
    SPILL: Final = "spill"
    NOTICE: Final = "notice"
    CELL_MS: Final = "ms"
    CLIENT_MS: Final = "client_ms"
    DROPPED: Final = "dropped"
    ERROR: Final = "error"
    ERROR_NAME: Final = "name"
    ERROR_MESSAGE: Final = "message"
    ERROR_TRACEBACK: Final = "traceback"
    ERROR_FRAMED: Final = "framed"
