"""``LizardCodeExecutor``: an ADK ``BaseCodeExecutor`` on ``lizard_core``'s persistent kernel.

Contract (proven against lizard-local in ``tests/test_executor.py``, with ADK ``Runner`` runs):

- **Sandbox.** One per executor, created by the first block (from ``snapshot_id`` if given, also
  when it replaces an expired one) or attached to with ``sandbox_id`` (a paused one is resumed);
  ``close()`` destroys one it created, ``close(keep=True)`` pauses it for a later run to attach
  to (its files stay; the first stateful block there says its variables were lost; a failed
  pause destroys the sandbox rather than leave it running). Building
  it makes no request. Every ADK session of the
  agent shares the sandbox (each with its own namespace): give users their own executor when
  their files must not meet. Keep-alive (on by default) extends it while blocks run; once it
  has expired anyway (idle past ``lifetime_ms``) or was destroyed, the next block creates a new
  one and runs there, and its result says that every session's state and files were lost (as
  ADK's E2B environment recreates its sandbox). An attached sandbox is never replaced.
- **State.** With ``stateful=True`` ADK gives a session's blocks one ``execution_id``; they run in
  one kernel, so variables carry over. Otherwise each block gets a fresh namespace (a kernel
  restart first: one request more). A block is one request, plus one listing for its files.
- **Kernels** (:mod:`lizard_adk._kernels`). At most ``max_kernels`` (default 8) sessions keep
  a kernel; one idle ``kernel_idle_s`` (default 30 minutes) or the least recently used past
  the maximum is stopped, and that session's next block says its state was lost. Blocks of one
  session run one at a time; blocks of different sessions run at once (their output files are
  found in the one ``working_dir``, so a file another session's block wrote meanwhile may come
  back with this block's).
- **Files** (``lizard_core.exchange``). ``input_files`` land in ``working_dir`` once each; files
  the block creates or changes there come back as ``output_files`` (up to ``max_output_bytes``
  in all; the output names those left in the sandbox), and so do images it shows, as
  ``figure_<cell>_<n>.png``. ADK saves them as artifacts.
- **Output.** ``stdout`` is what the block printed, then the text of its last expression (a
  DataFrame as its table), as in a notebook; past ``lizard_core.truncation``'s limit the model
  gets its head and tail around a marker. ``stderr`` is set exactly when the block failed
  (exception and traceback, timeout, lost kernel), which ADK counts against
  ``error_retry_attempts``; a successful block's stderr (warnings) goes to ``stdout``. When a
  session's state was lost (a resume, a snapshot, a replaced sandbox), its next block's output
  says why first; the block fails or succeeds on its own.
- **Timeout.** ``timeout_seconds`` (default 300, as ADK's local executor; None: the platform's
  one-hour limit) interrupts the block and keeps the namespace.
- **Errors.** A sandbox gone, rejected credentials and API failures raise ``lizard_core``'s
  error kinds; a block's own failure never raises.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import threading
import weakref
from dataclasses import dataclass
from typing import Any, Final

from google.adk.agents.invocation_context import InvocationContext
from google.adk.code_executors.base_code_executor import BaseCodeExecutor
from google.adk.code_executors.code_execution_utils import (
    CodeExecutionInput,
    CodeExecutionResult,
    File,
)
from pydantic import PrivateAttr

from lizard_core import ExecutionResult
from lizard_core.checks import check_seconds
from lizard_core.commands import UNTIMED_EXEC_S
from lizard_core.errors import LizardIntegrationError, SandboxGoneError
from lizard_core.exchange import FileExchange, Taken
from lizard_core.files import SandboxFiles
from lizard_core.session import Session
from lizard_core.truncation import head_and_tail

from ._environment import DEFAULT_WORKING_DIR
from ._kernels import KernelPool
from ._sandbox import SandboxOptions, check_dir, make_session

__all__ = [
    "DEFAULT_KERNEL_IDLE_S",
    "DEFAULT_MAX_KERNELS",
    "DEFAULT_MAX_OUTPUT_BYTES",
    "LizardCodeExecutor",
]

DEFAULT_MAX_OUTPUT_BYTES: Final = 32 * 1024 * 1024
"""Bytes of output files one block returns; larger files stay in the sandbox."""
DEFAULT_MAX_KERNELS: Final = 8
"""Kernels (ADK sessions with live state) one executor keeps in its sandbox."""
DEFAULT_KERNEL_IDLE_S: Final = 1800.0
"""Seconds a session's kernel is kept without a block before it is stopped."""
_IMAGES: Final = {"image/png": "png", "image/jpeg": "jpeg"}
_SANDBOX_REPLACED: Final = (
    "The sandbox had expired (or was destroyed) and was replaced by a new one: every session's "
    "variables, imports and functions, and the files written before, are lost. This block ran in "
    "the new sandbox."
)


def _destroy(holder: list[Session]) -> None:
    with contextlib.suppress(Exception):  # a last resort, at garbage collection or exit
        holder[0].destroy()


@dataclass(frozen=True)
class _Sandbox:
    """One sandbox of the executor, and what lives in it; replaced whole when it expires."""

    session: Session
    exchange: FileExchange
    kernels: KernelPool
    files_lock: threading.Lock


class LizardCodeExecutor(BaseCodeExecutor):
    """Run the code blocks an ADK agent writes in a Lizard sandbox: ``code_executor=...``.

    Takes ADK's fields (``stateful``, ``timeout_seconds``, ``error_retry_attempts``, ...), the
    :class:`~lizard_adk.SandboxOptions` (template ``interpreter`` by default; ``base`` works
    too), ``working_dir`` (the kernel's directory), ``max_output_bytes`` (output files per
    block), ``max_kernels`` and ``kernel_idle_s`` (the sessions' kernels kept), all as keyword
    arguments. An unknown keyword is a TypeError.
    """

    timeout_seconds: int | None = 300
    """Seconds a block may run before it is interrupted (None: the platform's one-hour limit)."""

    _options: dict[str, Any] = PrivateAttr()
    _working_dir: str = PrivateAttr()
    _max_output_bytes: int = PrivateAttr()
    _max_kernels: int = PrivateAttr()
    _kernel_idle_s: float | None = PrivateAttr()
    _attached: bool = PrivateAttr()
    _box: _Sandbox = PrivateAttr()
    _holder: list[Session] = PrivateAttr()
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)
    _closed: bool = PrivateAttr(default=False)
    _finalizer: Any = PrivateAttr(default=None)

    def __init__(
        self,
        *,
        working_dir: str = DEFAULT_WORKING_DIR,
        max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
        max_kernels: int = DEFAULT_MAX_KERNELS,
        kernel_idle_s: float | None = DEFAULT_KERNEL_IDLE_S,
        **data: Any,
    ) -> None:
        options = {k: data.pop(k) for k in SandboxOptions.__annotations__ if k in data}
        unknown = sorted(set(data) - set(type(self).model_fields))
        if unknown:  # pydantic would drop them silently
            raise TypeError(f"unexpected keyword arguments: {', '.join(unknown)}")
        super().__init__(**data)
        if self.timeout_seconds is not None and self.timeout_seconds <= 0:
            raise ValueError(f"timeout_seconds must be positive or None: {self.timeout_seconds}")
        if isinstance(max_kernels, bool) or not isinstance(max_kernels, int):
            raise TypeError(f"max_kernels must be an int, not {type(max_kernels).__name__}")
        if max_kernels < 1:
            raise ValueError(f"max_kernels must be at least 1, not {max_kernels}")
        if kernel_idle_s is not None:
            kernel_idle_s = check_seconds(kernel_idle_s, name="kernel_idle_s")
        self._options = options
        self._working_dir = check_dir("working_dir", working_dir)
        self._max_output_bytes = max_output_bytes
        self._max_kernels = max_kernels
        self._kernel_idle_s = None if kernel_idle_s is None else float(kernel_idle_s)
        self._box = self._new_box()
        self._holder = [self._box.session]
        self._attached = options.get("sandbox_id") is not None
        if not self._attached:  # dropped without close(), or at exit: delete its sandbox
            self._finalizer = weakref.finalize(self, _destroy, self._holder)

    def _new_box(self) -> _Sandbox:
        session = make_session(self._options, template="interpreter")
        files = SandboxFiles(session)
        exchange = FileExchange(files, self._working_dir, max_bytes=self._max_output_bytes)
        kernels = KernelPool(
            session, self._working_dir, max_kernels=self._max_kernels, idle_s=self._kernel_idle_s
        )
        return _Sandbox(session, exchange, kernels, threading.Lock())

    @property
    def sandbox_id(self) -> str | None:
        """The sandbox's id once it exists (or the id given to attach to), else None."""
        return self._box.session.sandbox_id

    @property
    def kernel_count(self) -> int:
        """Kernels alive in the sandbox now (at most ``max_kernels`` between blocks)."""
        return len(self._box.kernels)

    def __repr__(self) -> str:
        return f"LizardCodeExecutor(sandbox_id={self.sandbox_id!r}, stateful={self.stateful})"

    __str__ = __repr__

    def close(self, *, keep: bool = False) -> None:
        """Destroy the sandbox (an attached one keeps running); idempotent.

        ``keep=True`` pauses it (either kind) for a later run: save :attr:`sandbox_id` first.
        A sandbox already gone counts as done; one whose pause fails is destroyed rather than
        left running (billing), and the pause's error is raised.
        """
        if type(keep) is not bool:
            raise TypeError("keep must be a bool")
        self._closed = True
        if self._finalizer is not None:
            self._finalizer.detach()
        session = self._box.session
        if keep:
            session.keep_paused()
        elif self._attached:
            session.close()
        else:
            session.destroy()

    def __enter__(self) -> LizardCodeExecutor:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def execute_code(
        self, invocation_context: InvocationContext, code_execution_input: CodeExecutionInput
    ) -> CodeExecutionResult:
        """Run one code block; see the module docstring."""
        timeout = UNTIMED_EXEC_S if self.timeout_seconds is None else self.timeout_seconds
        execution_id = code_execution_input.execution_id
        # ADK passes a str as base64 (it encodes inline data so) and bytes as they are.
        inputs = {
            f.name: base64.b64decode(f.content) if isinstance(f.content, str) else f.content
            for f in code_execution_input.input_files
        }
        code = code_execution_input.code
        box = self._box
        try:
            result, taken = self._run(box, execution_id, code, inputs, timeout)
        except SandboxGoneError:
            if self._attached or self._closed:
                raise  # not ours to replace, or closed on purpose
            box = self._replace(box)
            result, taken = self._run(box, execution_id, code, inputs, timeout)
            result = _with_notice(result, _SANDBOX_REPLACED)
        return _adk_result(result, taken, timeout, stateful=execution_id is not None)

    def _replace(self, gone: _Sandbox) -> _Sandbox:
        """A new sandbox in place of ``gone`` (once, however many blocks found it gone)."""
        with self._lock:
            if self._box is gone:
                with contextlib.suppress(LizardIntegrationError):
                    gone.session.destroy()  # forget it; a 404 counts as done
                self._box = self._new_box()
                self._holder[0] = self._box.session
            return self._box

    def _run(
        self,
        box: _Sandbox,
        execution_id: str | None,
        code: str,
        inputs: dict[str, bytes],
        timeout: float,
    ) -> tuple[ExecutionResult, Taken]:
        with box.files_lock:
            box.exchange.put(inputs)
        slot, notice = box.kernels.acquire(execution_id)
        try:
            if execution_id is None and slot.blocks:
                slot.kernel.restart()  # a fresh namespace for every block
            result = slot.kernel.execute(code, timeout=timeout)
        finally:
            box.kernels.release(slot)
        with box.files_lock:
            taken = box.exchange.take()
        return (result if notice is None else _with_notice(result, notice)), taken


def _with_notice(result: ExecutionResult, notice: str) -> ExecutionResult:
    text = notice if result.notice is None else f"{notice} {result.notice}"
    return dataclasses.replace(result, state_lost=True, notice=text)


def _adk_result(
    result: ExecutionResult, taken: Taken, timeout: float, *, stateful: bool
) -> CodeExecutionResult:
    files = [File(f.name, f.data, f.mime_type) for f in taken.files]
    notes = [
        f"[lizard: {e.name} ({e.size} bytes) left in the sandbox: too large]"
        for e in taken.too_large
    ]
    for index, shown in enumerate(result.results, 1):
        for mime, extension in _IMAGES.items():
            if mime in shown.data:
                name = f"figure_{result.execution_count}_{index}.{extension}"
                files.append(File(name, base64.b64decode(shown.data[mime]), mime))
        if shown.omitted:
            notes.append(f"[lizard: {', '.join(shown.omitted)} left out of a result: too large]")
    stdout = result.stdout
    main = result.main_result
    if main is not None and main.text is not None and not set(_IMAGES) & set(main.data):
        stdout += ("\n" if stdout and not stdout.endswith("\n") else "") + main.text + "\n"
    # A lost state matters to a session that had one, or explains a failure; a block that
    # succeeded still succeeds, with the notice before its output.
    notice = [result.notice] if result.notice and (stateful or result.error) else []
    failure: list[str] = []
    if result.timed_out:
        failure.append(f"Code execution timed out after {timeout:g} seconds.")
    elif result.error is not None:
        failure.append(result.error.traceback or f"{result.error.name}: {result.error.message}")
    if failure:
        failure = notice + failure
        stderr = result.stderr + "".join(text.rstrip("\n") + "\n" for text in failure)
    else:
        stdout, stderr = stdout + result.stderr, ""  # warnings of a block that succeeded
        stdout = "".join(f"[lizard: {text}]\n" for text in notice) + stdout
    stdout = head_and_tail(stdout) + "".join(note + "\n" for note in notes)
    return CodeExecutionResult(stdout, head_and_tail(stderr), files, exit_code=1 if stderr else 0)
