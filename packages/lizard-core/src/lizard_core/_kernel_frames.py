"""The kernel client's frames, checked before the host believes them.

Code in the sandbox is untrusted, and a cell can reach both the kernel daemon's channel (its own
call stack leads there) and the kernel client's stdout (``/proc/<pid>/fd/1``), so any frame of a
kernel call may be forged. Contract:

- :func:`check_frame` accepts only the frame types the daemon and the client send during a call
  (``o``, ``cut``, ``res``, ``rd``, ``et``, ``cell``, ``spawned``), each with the keys and types
  the host reads; :func:`check_end` does the same for the ``end`` frame. Anything else (an
  unknown type, a missing key, a wrong type, a stream number other than 1 or 2, base64 that does
  not decode) is a :class:`~lizard_core.errors.GuestProtocolError` that names the frame type,
  never a ``KeyError``, ``TypeError`` or ``ValueError`` from deep inside the host.
- Checks look at types and small fixed bounds only (names, kernel ids, lists of mime types);
  how much output and result data a call may carry is bounded where it is accumulated
  (``lizard_core.kernel``), so that a frame that passes here still cannot make the host hold
  more than the call's limits.
"""

from __future__ import annotations

import binascii
from typing import Any, Final

from lizard_core._wire import GuestFrame, KernelEnd, KernelFrame
from lizard_core.errors import GuestProtocolError

__all__ = ["STREAMS", "check_end", "check_frame", "decode_output"]

STREAMS: Final = {1: "stdout", 2: "stderr"}
"""Stream numbers of ``o`` and ``cut`` frames."""
_SHORT: Final = 256
"""Longest kernel id, mime type or loss reason believed."""
_MAX_OMITTED: Final = 32
_ERROR_FIELDS: Final = (KernelEnd.ERROR_MESSAGE, KernelEnd.ERROR_TRACEBACK)

Frame = dict[str, Any]


def _bad(kind: object, why: str) -> GuestProtocolError:
    shown = kind if isinstance(kind, str) and len(kind) <= 16 else "?"
    return GuestProtocolError(f"The kernel sent a malformed {shown!r} frame ({why}).")


def _int(frame: Frame, key: str, *, optional: bool = False) -> None:
    value = frame.get(key)
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _bad(frame[GuestFrame.TYPE], f"{key} is not a non-negative integer")


def _str(frame: Frame, key: str, *, optional: bool = False, short: bool = False) -> None:
    value = frame.get(key)
    if value is None and optional:
        return
    if not isinstance(value, str) or (short and len(value) > _SHORT):
        raise _bad(frame[GuestFrame.TYPE], f"{key} is not a{' short' if short else ''} string")


def _bool(frame: Frame, key: str) -> None:
    if not isinstance(frame.get(key, False), bool):
        raise _bad(frame[GuestFrame.TYPE], f"{key} is not a boolean")


def _number(frame: Frame, key: str) -> None:
    value = frame.get(key)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
        raise _bad(frame[GuestFrame.TYPE], f"{key} is not a number")


def _stream(frame: Frame) -> None:
    stream = frame.get(KernelFrame.STREAM)
    if isinstance(stream, bool) or stream not in STREAMS:
        raise _bad(frame[GuestFrame.TYPE], "s is not 1 or 2")


def check_frame(frame: Frame) -> Frame:
    """``frame`` if it is a well-formed frame of a running kernel call; else GuestProtocolError."""
    kind = frame.get(GuestFrame.TYPE)
    if kind == KernelFrame.OUTPUT:
        _stream(frame)
        _str(frame, KernelFrame.DATA)
    elif kind == KernelFrame.CUT:
        _stream(frame)
        _int(frame, KernelFrame.LIMIT)
    elif kind == KernelFrame.RESULT:
        _int(frame, KernelFrame.INDEX)
        _bool(frame, KernelFrame.MAIN)
        omitted = frame.get(KernelFrame.OMITTED)
        if (
            not isinstance(omitted, list)
            or len(omitted) > _MAX_OMITTED
            or not all(isinstance(m, str) and len(m) <= _SHORT for m in omitted)
        ):
            raise _bad(kind, "omit is not a short list of mime types")
    elif kind == KernelFrame.RESULT_DATA:
        _int(frame, KernelFrame.INDEX)
        _str(frame, KernelFrame.MIME, short=True)
        _str(frame, KernelFrame.DATA)
    elif kind == KernelFrame.ERROR_TEXT:
        if frame.get(KernelFrame.FIELD) not in _ERROR_FIELDS:
            raise _bad(kind, "f is not 'message' or 'traceback'")
        _str(frame, KernelFrame.DATA)
    elif kind == KernelFrame.CELL:
        _str(frame, KernelFrame.KERNEL_ID, short=True)
        _int(frame, KernelFrame.COUNT)
        _int(frame, KernelFrame.PID, optional=True)
    elif kind == KernelFrame.SPAWNED:
        _str(frame, KernelFrame.LOST, optional=True, short=True)
    else:
        raise _bad(kind, "not a frame type of a kernel call")
    return frame


def check_end(frame: Frame) -> Frame:
    """``frame`` if it is a well-formed ``end`` frame of a kernel call; else GuestProtocolError."""
    for key in (
        KernelEnd.TIMED_OUT,
        KernelEnd.STATE_LOST,
        KernelEnd.NEED_SOURCE,
        KernelEnd.RUNNING,
        KernelEnd.CLIENT_GONE,
    ):
        _bool(frame, key)
    _int(frame, KernelEnd.COUNT, optional=True)
    _str(frame, KernelEnd.KERNEL_ID, optional=True, short=True)
    _str(frame, KernelEnd.SPILL, optional=True, short=True)
    _str(frame, KernelEnd.NOTICE, optional=True)
    _number(frame, KernelEnd.CELL_MS)
    _number(frame, KernelEnd.CLIENT_MS)
    dropped = frame.get(KernelEnd.DROPPED)
    if dropped is not None and not (
        isinstance(dropped, list)
        and len(dropped) == 2
        and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in dropped)
    ):
        raise _bad("end", "dropped is not two byte counts")
    error = frame.get(KernelEnd.ERROR)
    if error is not None:
        if not isinstance(error, dict):
            raise _bad("end", "error is not an object")
        tagged = error | {GuestFrame.TYPE: GuestFrame.END}
        _str(tagged, KernelEnd.ERROR_NAME, short=True)
        _str(tagged, KernelEnd.ERROR_MESSAGE)
        _str(tagged, KernelEnd.ERROR_TRACEBACK, optional=True)
        framed = error.get(KernelEnd.ERROR_FRAMED)
        if framed is not None and (
            not isinstance(framed, list) or not all(f in _ERROR_FIELDS for f in framed)
        ):
            raise _bad("end", "error.framed is not a list of error fields")
    return frame


def decode_output(frame: Frame) -> bytes:
    """The bytes of a checked ``o`` frame; base64 that does not decode is a GuestProtocolError."""
    try:
        return binascii.a2b_base64(frame[KernelFrame.DATA], strict_mode=True)
    except (binascii.Error, ValueError):
        raise _bad("o", "d is not base64") from None
