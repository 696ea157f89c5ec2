"""``LizardCodeExecutor``: an ADK ``BaseCodeExecutor`` on ``lizard_core``'s persistent kernel.

What it maps (proven against lizard-local in ``tests/test_executor.py``, with an ADK ``Runner``):

- **Sandbox.** One per executor, created by the first code block (or attached to with
  ``sandbox_id``); ``close()`` destroys one it created. Building it validates every option and
  makes no request. An executor sits on an agent, so every ADK session of that agent shares
  its sandbox (each stateful session with its own namespace): give each user their own
  executor when their files must not meet.
- **State.** With ``stateful=True`` ADK gives every block of a session the same
  ``execution_id``; those blocks run in one kernel, so variables, imports and functions carry
  over. Without it every block starts in a fresh namespace (the kernel is restarted first, one
  request more). One code block is one request; blocks of one executor run one at a time.
- **Files.** ``input_files`` are written into ``working_dir`` (the kernel's directory) once
  each, so ``pd.read_csv(name)`` finds them. Regular files the block creates or changes there
  come back as ``output_files`` (one listing request, then one read per file, up to
  ``max_output_bytes`` in all; a file past that stays in the sandbox and the output says so),
  as do images the block shows (matplotlib figures, PIL images, ``display``): ``image/png``,
  named ``figure_<cell>_<n>.png``. ADK saves them all as artifacts.
- **Output.** ``stdout`` is what the block printed, then the text form of its last expression
  (a DataFrame as its table), as in a notebook and ADK's Vertex executors. ``stderr`` is non-empty
  exactly when the block failed (an exception with its traceback, a timeout, a kernel that had
  to be restarted), since ADK counts those against ``error_retry_attempts``; what a block that
  succeeded wrote to stderr (warnings) is appended to its ``stdout`` instead.
- **Timeout.** ``timeout_seconds`` (default 300, as ADK's local and container executors; None
  means the platform's one-hour limit) interrupts the block, keeps the namespace and reports
  the output so far with the timeout in ``stderr``.
- **Errors.** A sandbox that is gone, rejected credentials and API failures raise
  ``lizard_core``'s error kinds (ADK ends the run with them); a block's own failure never raises.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import mimetypes
import threading
import weakref
from collections.abc import Mapping
from typing import Any, Final

from google.adk.agents.invocation_context import InvocationContext
from google.adk.code_executors.base_code_executor import BaseCodeExecutor
from google.adk.code_executors.code_execution_utils import (
    CodeExecutionInput,
    CodeExecutionResult,
    File,
)
from pydantic import PrivateAttr
from typing_extensions import override

from lizard_core.changes import DirectoryWatch
from lizard_core.commands import UNTIMED_EXEC_S
from lizard_core.config import Size
from lizard_core.files import SandboxFiles
from lizard_core.kernel import ExecutionResult, Kernel
from lizard_core.session import Session

from ._environment import DEFAULT_WORKING_DIR
from ._sandbox import check_dir, make_session

__all__ = ["DEFAULT_MAX_OUTPUT_BYTES", "LizardCodeExecutor"]

DEFAULT_MAX_OUTPUT_BYTES: Final = 32 * 1024 * 1024
"""Bytes of output files one block returns; larger files stay in the sandbox."""
_IMAGES: Final = {"image/png": "png", "image/jpeg": "jpeg"}


def _destroy(session: Session) -> None:
    with contextlib.suppress(Exception):  # a last resort, at garbage collection or exit
        session.destroy()


def _input_bytes(file: File) -> bytes:
    # ADK passes a str as base64 (it encodes inline data so) and bytes as they are.
    if isinstance(file.content, str):
        return base64.b64decode(file.content, validate=True)
    return bytes(file.content)


class LizardCodeExecutor(BaseCodeExecutor):
    """Run the code blocks an ADK agent writes in a Lizard sandbox: ``code_executor=...``.

    Keyword arguments besides ADK's own fields (``stateful``, ``timeout_seconds``,
    ``error_retry_attempts``, ``optimize_data_file``, the delimiters): ``api_key``, ``api_url``,
    ``project_id`` (default: ``LIZARD_*`` variables), ``template`` (default ``interpreter``,
    with the data stack; ``base`` works too), ``size``, ``lifetime_ms``, ``envs`` (environment
    variables for the sandbox; nothing is copied from the host), ``working_dir``,
    ``sandbox_id`` (attach, and leave running at ``close()``), ``keep_alive`` and
    ``max_output_bytes``. See the module docstring for the contract.
    """

    timeout_seconds: int | None = 300
    """Seconds a block may run before it is interrupted (None: the platform's one-hour limit)."""

    _session: Session = PrivateAttr()
    _files: SandboxFiles = PrivateAttr()
    _watch: DirectoryWatch = PrivateAttr()
    _working_dir: str = PrivateAttr()
    _max_output: int = PrivateAttr()
    _attached: bool = PrivateAttr()
    _kernels: dict[str, Kernel] = PrivateAttr(default_factory=dict)
    _placed: dict[str, str] = PrivateAttr(default_factory=dict)
    _fresh_used: bool = PrivateAttr(default=False)
    _marked: bool = PrivateAttr(default=False)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)
    _finalizer: Any = PrivateAttr(default=None)

    def __init__(
        self,
        *,
        api_key: str | None = None,
        api_url: str | None = None,
        project_id: str | None = None,
        template: str = "interpreter",
        size: Size | None = None,
        lifetime_ms: int = 900_000,
        envs: Mapping[str, str] | None = None,
        working_dir: str = DEFAULT_WORKING_DIR,
        sandbox_id: str | None = None,
        keep_alive: bool = True,
        max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
        **data: Any,
    ) -> None:
        super().__init__(**data)
        if self.timeout_seconds is not None and self.timeout_seconds <= 0:
            raise ValueError(
                f"timeout_seconds must be positive or None, not {self.timeout_seconds}"
            )
        if isinstance(max_output_bytes, bool) or not isinstance(max_output_bytes, int):
            raise TypeError("max_output_bytes must be an int")
        if max_output_bytes < 0:
            raise ValueError("max_output_bytes must be >= 0")
        self._working_dir = check_dir("working_dir", working_dir)
        self._session = make_session(
            api_key=api_key,
            api_url=api_url,
            project_id=project_id,
            template=template,
            size=size,
            lifetime_ms=lifetime_ms,
            envs=envs,
            sandbox_id=sandbox_id,
            keep_alive=keep_alive,
        )
        self._files = SandboxFiles(self._session)
        self._watch = DirectoryWatch(self._files, self._working_dir)
        self._max_output = max_output_bytes
        self._attached = sandbox_id is not None
        if not self._attached:
            # An executor dropped without close(), or the process exiting, deletes its sandbox.
            self._finalizer = weakref.finalize(self, _destroy, self._session)

    @property
    def sandbox_id(self) -> str | None:
        """The sandbox's id once it exists (or the id given to attach to), else None."""
        return self._session.sandbox_id

    def __repr__(self) -> str:
        return f"LizardCodeExecutor(sandbox_id={self.sandbox_id!r}, stateful={self.stateful})"

    def __str__(self) -> str:
        return repr(self)

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

    @override
    def execute_code(
        self,
        invocation_context: InvocationContext,
        code_execution_input: CodeExecutionInput,
    ) -> CodeExecutionResult:
        """Run one code block; see the module docstring."""
        timeout = UNTIMED_EXEC_S if self.timeout_seconds is None else self.timeout_seconds
        with self._lock:
            kernel = self._kernel(code_execution_input.execution_id)
            self._place(code_execution_input.input_files)
            result = kernel.execute(code_execution_input.code, timeout=timeout)
            files, notes = self._output_files(result)
        stateful = code_execution_input.execution_id is not None
        return _adk_result(result, files, notes, timeout, stateful=stateful)

    def _kernel(self, execution_id: str | None) -> Kernel:
        if execution_id is None:
            if "" not in self._kernels:
                self._kernels[""] = Kernel(self._session, name="adk", cwd=self._working_dir)
            kernel = self._kernels[""]
            if self._fresh_used:
                kernel.restart()
            self._fresh_used = True
            return kernel
        # Kernel names are short and plain: an ADK session id is neither, necessarily.
        name = "adk-" + hashlib.sha256(execution_id.encode()).hexdigest()[:24]
        if name not in self._kernels:
            self._kernels[name] = Kernel(self._session, name=name, cwd=self._working_dir)
        return self._kernels[name]

    def _place(self, inputs: list[File]) -> None:
        written = False
        for file in inputs:
            data = _input_bytes(file)
            digest = hashlib.sha256(data).hexdigest()
            if "/" in file.name or file.name in ("", ".", ".."):
                raise ValueError(f"input file names must be plain file names: {file.name!r}")
            if self._placed.get(file.name) != digest:
                self._files.write_bytes(f"{self._working_dir}/{file.name}", data)
                self._placed[file.name] = digest
                written = True
        if written or not self._marked:
            self._watch.mark()  # inputs, and what was there before the first block, are no output
            self._marked = True

    def _output_files(self, result: ExecutionResult) -> tuple[list[File], list[str]]:
        files: list[File] = []
        notes: list[str] = []
        for index, shown in enumerate(result.results, 1):
            for mime, extension in _IMAGES.items():
                if mime in shown.data:
                    name = f"figure_{result.execution_count}_{index}.{extension}"
                    files.append(File(name, base64.b64decode(shown.data[mime]), mime))
            if shown.omitted:
                notes.append(
                    f"[lizard: {', '.join(shown.omitted)} omitted from a result: too large]"
                )
        budget = self._max_output
        for entry in self._watch.changed():
            size = entry.size or 0
            if size > budget:
                notes.append(
                    f"[lizard: {entry.name} ({size} bytes) left in the sandbox: too large]"
                )
                continue
            budget -= size
            mime = mimetypes.guess_type(entry.name)[0] or "application/octet-stream"
            files.append(File(entry.name, self._files.read_bytes(entry.path), mime))
        return files, notes


def _adk_result(
    result: ExecutionResult, files: list[File], notes: list[str], timeout: float, *, stateful: bool
) -> CodeExecutionResult:
    stdout = result.stdout
    main = result.main_result
    if main is not None and main.text is not None and not any(m in main.data for m in _IMAGES):
        stdout += ("" if not stdout or stdout.endswith("\n") else "\n") + main.text + "\n"
    failure: list[str] = []
    if result.notice and (stateful or result.error is not None):
        failure.append(result.notice)  # the namespace earlier blocks built is gone
    if result.timed_out:
        failure.append(f"Code execution timed out after {timeout:g} seconds.")
    elif result.error is not None:
        failure.append(result.error.traceback or f"{result.error.name}: {result.error.message}")
    if failure or result.error is not None:
        stderr = "".join([result.stderr, *(text.rstrip("\n") + "\n" for text in failure)])
    else:
        stdout, stderr = stdout + result.stderr, ""  # warnings of a block that succeeded
    stdout += "".join(note + "\n" for note in notes)
    return CodeExecutionResult(
        stdout=stdout, stderr=stderr, output_files=files, exit_code=1 if stderr else 0
    )
