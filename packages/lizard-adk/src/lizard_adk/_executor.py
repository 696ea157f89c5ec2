"""``LizardCodeExecutor``: an ADK ``BaseCodeExecutor`` on ``lizard_core``'s persistent kernel.

Contract (proven against lizard-local in ``tests/test_executor.py``, with ADK ``Runner`` runs):

- **Sandbox.** One per executor, created by the first block (or attached to with ``sandbox_id``);
  ``close()`` destroys one it created. Building it makes no request. Every ADK session of the
  agent shares the sandbox (each with its own namespace): give users their own executor when
  their files must not meet.
- **State.** With ``stateful=True`` ADK gives a session's blocks one ``execution_id``; they run in
  one kernel, so variables carry over. Otherwise each block gets a fresh namespace (a kernel
  restart first: one request more). A block is one request, plus one listing for its files;
  blocks of one executor run one at a time.
- **Files** (``lizard_core.exchange``). ``input_files`` land in ``working_dir`` once each; files
  the block creates or changes there come back as ``output_files`` (up to ``max_output_bytes``
  in all; the output names those left in the sandbox), and so do images it shows, as
  ``figure_<cell>_<n>.png``. ADK saves them as artifacts.
- **Output.** ``stdout`` is what the block printed, then the text of its last expression (a
  DataFrame as its table), as in a notebook. ``stderr`` is set exactly when the block failed
  (exception and traceback, timeout, lost kernel), which ADK counts against
  ``error_retry_attempts``; a successful block's stderr (warnings) goes to ``stdout``.
- **Timeout.** ``timeout_seconds`` (default 300, as ADK's local executor; None: the platform's
  one-hour limit) interrupts the block and keeps the namespace.
- **Errors.** A sandbox gone, rejected credentials and API failures raise ``lizard_core``'s
  error kinds; a block's own failure never raises.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import threading
import weakref
from typing import Any, Final

from google.adk.agents.invocation_context import InvocationContext
from google.adk.code_executors.base_code_executor import BaseCodeExecutor
from google.adk.code_executors.code_execution_utils import (
    CodeExecutionInput,
    CodeExecutionResult,
    File,
)
from pydantic import PrivateAttr

from lizard_core import ExecutionResult, Kernel
from lizard_core.commands import UNTIMED_EXEC_S
from lizard_core.exchange import FileExchange, Taken
from lizard_core.files import SandboxFiles
from lizard_core.session import Session

from ._environment import DEFAULT_WORKING_DIR
from ._sandbox import SandboxOptions, check_dir, make_session

__all__ = ["DEFAULT_MAX_OUTPUT_BYTES", "LizardCodeExecutor"]

DEFAULT_MAX_OUTPUT_BYTES: Final = 32 * 1024 * 1024
"""Bytes of output files one block returns; larger files stay in the sandbox."""
_IMAGES: Final = {"image/png": "png", "image/jpeg": "jpeg"}


def _destroy(session: Session) -> None:
    with contextlib.suppress(Exception):  # a last resort, at garbage collection or exit
        session.destroy()


class LizardCodeExecutor(BaseCodeExecutor):
    """Run the code blocks an ADK agent writes in a Lizard sandbox: ``code_executor=...``.

    Takes ADK's fields (``stateful``, ``timeout_seconds``, ``error_retry_attempts``, ...), the
    :class:`~lizard_adk.SandboxOptions` (template ``interpreter`` by default; ``base`` works
    too), ``working_dir`` (the kernel's directory) and ``max_output_bytes`` (output files per
    block), all as keyword arguments. An unknown keyword is a TypeError.
    """

    timeout_seconds: int | None = 300
    """Seconds a block may run before it is interrupted (None: the platform's one-hour limit)."""

    _session: Session = PrivateAttr()
    _exchange: FileExchange = PrivateAttr()
    _working_dir: str = PrivateAttr()
    _attached: bool = PrivateAttr()
    _kernels: dict[str | None, Kernel] = PrivateAttr(default_factory=dict)
    _fresh_used: bool = PrivateAttr(default=False)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)
    _finalizer: Any = PrivateAttr(default=None)

    def __init__(
        self,
        *,
        working_dir: str = DEFAULT_WORKING_DIR,
        max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
        **data: Any,
    ) -> None:
        options = {k: data.pop(k) for k in SandboxOptions.__annotations__ if k in data}
        unknown = sorted(set(data) - set(type(self).model_fields))
        if unknown:  # pydantic would drop them silently
            raise TypeError(f"unexpected keyword arguments: {', '.join(unknown)}")
        super().__init__(**data)
        if self.timeout_seconds is not None and self.timeout_seconds <= 0:
            raise ValueError(f"timeout_seconds must be positive or None: {self.timeout_seconds}")
        self._working_dir = check_dir("working_dir", working_dir)
        self._session = make_session(options, template="interpreter")
        files = SandboxFiles(self._session)
        self._exchange = FileExchange(files, self._working_dir, max_bytes=max_output_bytes)
        self._attached = options.get("sandbox_id") is not None
        if not self._attached:  # dropped without close(), or at exit: delete its sandbox
            self._finalizer = weakref.finalize(self, _destroy, self._session)

    @property
    def sandbox_id(self) -> str | None:
        """The sandbox's id once it exists (or the id given to attach to), else None."""
        return self._session.sandbox_id

    def __repr__(self) -> str:
        return f"LizardCodeExecutor(sandbox_id={self.sandbox_id!r}, stateful={self.stateful})"

    __str__ = __repr__

    def close(self) -> None:
        """Destroy the sandbox (an attached one keeps running); idempotent."""
        if self._finalizer is not None:
            self._finalizer.detach()
        if self._attached:
            self._session.close()
        else:
            self._session.destroy()

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
        with self._lock:
            self._exchange.put(inputs)
            kernel = self._kernel(execution_id)
            result = kernel.execute(code_execution_input.code, timeout=timeout)
            taken = self._exchange.take()
        return _adk_result(result, taken, timeout, stateful=execution_id is not None)

    def _kernel(self, execution_id: str | None) -> Kernel:
        kernel = self._kernels.get(execution_id)
        if kernel is None:
            # Kernel names are short and plain; an ADK session id need not be.
            digest = hashlib.sha256((execution_id or "").encode()).hexdigest()[:24]
            name = "adk" if execution_id is None else f"adk-{digest}"
            kernel = self._kernels[execution_id] = Kernel(
                self._session, name=name, cwd=self._working_dir
            )
        if execution_id is None:
            if self._fresh_used:
                kernel.restart()
            self._fresh_used = True
        return kernel


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
    failure = [result.notice] if result.notice and (stateful or result.error) else []
    if result.timed_out:
        failure.append(f"Code execution timed out after {timeout:g} seconds.")
    elif result.error is not None:
        failure.append(result.error.traceback or f"{result.error.name}: {result.error.message}")
    if failure:
        stderr = result.stderr + "".join(text.rstrip("\n") + "\n" for text in failure)
    else:
        stdout, stderr = stdout + result.stderr, ""  # warnings of a block that succeeded
    stdout += "".join(note + "\n" for note in notes)
    return CodeExecutionResult(stdout, stderr, files, exit_code=1 if stderr else 0)
