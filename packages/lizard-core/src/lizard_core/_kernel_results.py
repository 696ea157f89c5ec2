"""What a kernel call returns, and how it is assembled from the kernel's checked frames.

Contract:

- :class:`ExecutionResult` holds a cell's output, rich results and error exactly as the kernel
  sent them, with :attr:`~ExecutionResult.output_truncated` and
  :attr:`~ExecutionResult.dropped_bytes` saying where a limit cut it: a cut result is never
  presented as whole.
- The assembler accepts only frames :mod:`lizard_core._kernel_frames` checked, and bounds what it
  holds by the call's limits (output, result data and error text), raising
  :class:`~lizard_core.errors.GuestProtocolError` past them instead of growing.
"""

from __future__ import annotations

import base64
import codecs
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from lizard_core._kernel_frames import STREAMS, check_frame, decode_output
from lizard_core._wire import GuestFrame, KernelEnd, KernelFrame
from lizard_core.errors import GuestProtocolError

__all__ = [
    "OUTPUT_CUT_MARKER",
    "Assembler",
    "ExecutionError",
    "ExecutionResult",
    "OutputCallback",
    "RichResult",
]

Frame = dict[str, Any]

OutputCallback = Callable[[str, str], object]
"""``on_output(stream, text)``: ``stream`` is ``"stdout"`` or ``"stderr"``, ``text`` a chunk."""


OUTPUT_CUT_MARKER: Final = (
    "\n[lizard: output limit of {limit} bytes reached; "
    "the rest of this cell's output was dropped]\n"
)
"""Written into the stream where output was cut (``{limit}`` is the limit in bytes)."""
_RESULT_OVERHEAD: Final = 256
"""What one rich result costs against the result budget before its data."""
_OUTPUT_SLACK: Final = 64 * 1024
"""Output believed past ``max_output_bytes`` (the daemon cuts at a chunk boundary)."""


@dataclass(frozen=True)
class ExecutionError:
    """What a cell raised: class name, message (``str(exc)``) and an ANSI-free traceback."""

    name: str
    message: str
    traceback: str


@dataclass(frozen=True)
class RichResult:
    """One value shown by a cell, as mime type -> text (images are base64).

    ``is_main_result`` marks the value of the cell's last expression; figures and ``display()``
    calls are not main results. ``omitted`` names mime types left out for size.
    """

    data: Mapping[str, str]
    is_main_result: bool
    omitted: tuple[str, ...] = ()

    @property
    def text(self) -> str | None:
        """The ``text/plain`` form."""
        return self.data.get("text/plain")

    @property
    def png(self) -> bytes | None:
        """The ``image/png`` form, decoded."""
        encoded = self.data.get("image/png")
        return None if encoded is None else base64.b64decode(encoded)


@dataclass(frozen=True)
class ExecutionResult:
    """The outcome of one cell (or one :meth:`Kernel.install`).

    ``stdout``/``stderr`` hold the output as streamed (UTF-8, invalid bytes replaced), with the
    cut marker when ``output_truncated``. ``error`` is None when the cell completed.
    ``execution_count`` numbers the cells of the current kernel (it restarts at 1 with a fresh
    kernel; 0 when no cell ran). ``state_lost`` means the namespace this call ran in (or, after a
    kill, the one the next call will run in) is not the one the previous calls built; ``notice``
    then says why, in words fit for a user or a model. ``guest_ms`` is the time spent in the
    sandbox by the kernel client, from its start to its final frame.
    """

    stdout: str = ""
    stderr: str = ""
    results: tuple[RichResult, ...] = ()
    error: ExecutionError | None = None
    execution_count: int = 0
    timed_out: bool = False
    state_lost: bool = False
    notice: str | None = None
    output_truncated: bool = False
    dropped_bytes: int = 0
    kernel_id: str | None = None
    guest_ms: float | None = None
    cell_ms: float | None = field(default=None, repr=False)

    @property
    def main_result(self) -> RichResult | None:
        """The value of the cell's last expression, if it had one that was not None."""
        for result in self.results:
            if result.is_main_result:
                return result
        return None

    @property
    def text(self) -> str | None:
        """``text/plain`` of the main result."""
        main = self.main_result
        return None if main is None else main.text


class Assembler:
    """Builds an :class:`ExecutionResult` from the kernel client's frames, as they arrive."""

    def __init__(self, on_output: OutputCallback | None, max_output: int, max_result: int) -> None:
        self.on_output = on_output
        self.max_output = max_output
        # A guard against a misbehaving guest: the guest enforces the real limits.
        self.max_result_total = 64 * max_result + 1024 * 1024
        # The most a spill file can hold within those limits: output as base64 frames, result
        # and error text as JSON strings (escaped text, e.g. non-Latin, passes it only when
        # the results near their total anyway).
        self.spill_budget = 2 * (max_output + _OUTPUT_SLACK) + 2 * self.max_result_total
        self.chunks: dict[str, list[str]] = {"stdout": [], "stderr": []}
        self.decoders = {s: codecs.getincrementaldecoder("utf-8")("replace") for s in STREAMS}
        self.received = 0
        self.truncated = False
        self.results: dict[int, tuple[bool, tuple[str, ...], dict[str, list[str]]]] = {}
        self.result_size = 0
        self.kernel_id: str | None = None
        self.count = 0
        self.lost: str | None = None
        self.error_parts: dict[str, list[str]] = {}

    def feed(self, frame: Frame) -> None:
        kind = check_frame(frame)[GuestFrame.TYPE]
        if kind == KernelFrame.OUTPUT:
            index = frame[KernelFrame.STREAM]
            data = decode_output(frame)
            self.received += len(data)
            if self.received > self.max_output + _OUTPUT_SLACK:
                raise GuestProtocolError("The kernel sent more output than its limit allows.")
            self._text(index, self.decoders[index].decode(data))
        elif kind == KernelFrame.CUT:
            if self.truncated:
                raise GuestProtocolError("The kernel cut a cell's output twice.")
            self.truncated = True
            index = frame[KernelFrame.STREAM]
            self._text(index, self.decoders[index].decode(b"", final=True))
            self._text(index, OUTPUT_CUT_MARKER.format(limit=frame[KernelFrame.LIMIT]))
        elif kind == KernelFrame.RESULT:
            index = frame[KernelFrame.INDEX]
            # Each result costs the host a little even without data: counted, so that a flood
            # of empty results is bounded like their data.
            self._count_result(_RESULT_OVERHEAD, "results")
            if index in self.results:
                raise GuestProtocolError("The kernel sent the same result twice.")
            self.results[index] = (frame[KernelFrame.MAIN], tuple(frame[KernelFrame.OMITTED]), {})
        elif kind == KernelFrame.RESULT_DATA:
            piece = frame[KernelFrame.DATA]
            self._count_result(len(piece), "result data")
            try:
                pieces = self.results[frame[KernelFrame.INDEX]][2]
            except KeyError:
                raise GuestProtocolError("The kernel sent data for an unknown result.") from None
            pieces.setdefault(frame[KernelFrame.MIME], []).append(piece)
        elif kind == KernelFrame.ERROR_TEXT:
            piece = frame[KernelFrame.DATA]
            self._count_result(len(piece), "error text")
            self.error_parts.setdefault(frame[KernelFrame.FIELD], []).append(piece)
        elif kind == KernelFrame.CELL:
            self.kernel_id = frame[KernelFrame.KERNEL_ID]
            self.count = frame[KernelFrame.COUNT]
        elif kind == KernelFrame.SPAWNED:
            self.lost = frame.get(KernelFrame.LOST)

    def _count_result(self, size: int, what: str) -> None:
        self.result_size += size
        if self.result_size > self.max_result_total:
            raise GuestProtocolError(f"The kernel sent more {what} than its limit allows.")

    def _text(self, index: int, text: str) -> None:
        if not text:
            return
        stream = STREAMS[index]
        self.chunks[stream].append(text)
        if self.on_output is not None:
            self.on_output(stream, text)

    def result(self, final: Frame, lost_notice: str | None) -> ExecutionResult:
        for index in STREAMS:
            self._text(index, self.decoders[index].decode(b"", final=True))
        error = final.get(KernelEnd.ERROR)
        if error is not None:
            # A long message (a final answer, say) or traceback came whole, in frames.
            for field in error.get(KernelEnd.ERROR_FRAMED) or ():
                error[field] = "".join(self.error_parts.get(field, ()))
        dropped = final.get(KernelEnd.DROPPED) or [0, 0]
        notice = final.get(KernelEnd.NOTICE) or lost_notice
        return ExecutionResult(
            stdout="".join(self.chunks["stdout"]),
            stderr="".join(self.chunks["stderr"]),
            results=tuple(
                RichResult(
                    data={mime: "".join(parts) for mime, parts in data.items()},
                    is_main_result=main,
                    omitted=omitted,
                )
                for _, (main, omitted, data) in sorted(self.results.items())
            ),
            error=None
            if error is None
            else ExecutionError(
                name=str(error[KernelEnd.ERROR_NAME]),
                message=str(error[KernelEnd.ERROR_MESSAGE]),
                traceback=str(error.get(KernelEnd.ERROR_TRACEBACK) or ""),
            ),
            execution_count=int(final.get(KernelEnd.COUNT) or self.count),
            timed_out=bool(final.get(KernelEnd.TIMED_OUT)),
            state_lost=bool(final.get(KernelEnd.STATE_LOST)) or lost_notice is not None,
            notice=notice,
            output_truncated=self.truncated,
            dropped_bytes=int(sum(dropped)),
            kernel_id=final.get(KernelEnd.KERNEL_ID) or self.kernel_id,
            guest_ms=final.get(KernelEnd.CLIENT_MS),
            cell_ms=final.get(KernelEnd.CELL_MS),
        )
