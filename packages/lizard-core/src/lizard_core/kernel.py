"""A persistent Python kernel in the sandbox: one namespace, one request per cell, no Jupyter.

:class:`Kernel` runs cells in a standard-library daemon in the sandbox
(``lizard_core._guest.kernel_daemon``), reached through :func:`lizard_core.guest.run_guest`.
What holds (tested in ``tests/test_kernel.py`` and ``tests/test_kernel_daemon.py``):

- **Cost.** One exec per :meth:`Kernel.execute`, the first included (the client starts the
  daemon). Output past the stream budget costs one ``GET files``; a request over
  :data:`~lizard_core._staging.STAGE_OVER_BYTES` is uploaded first (:mod:`lizard_core._staging`).
  Constructing a kernel makes no request; bad arguments raise TypeError/ValueError first.
- **Cells run as IPython runs them.** The last expression is the result (``;`` hides it); names,
  imports and ``__future__`` flags persist; top-level ``await`` and ``display(obj)`` work.
- **Output** from ``sys.stdout``/``stderr`` and descriptors 1 and 2 reaches ``on_output`` in
  order while the cell runs. Past ``max_output_bytes`` it is cut with
  :data:`OUTPUT_CUT_MARKER` and :attr:`ExecutionResult.output_truncated` set; never silently.
- **Rich results** (``text/plain``, ``image/png``, HTML, JSON, ``_repr_*_``) over
  ``max_result_bytes`` are cut with a marker or named in :attr:`RichResult.omitted`.
- **Errors.** Any BaseException from a cell is an :class:`ExecutionError` (class name, message,
  ANSI-free traceback of the cell's frames); the kernel lives on.
- **Timeouts** interrupt the cell and keep the namespace (``TimeoutError``,
  :attr:`ExecutionResult.timed_out`). A cell that does not stop within ``grace``, or a kernel
  that died, means a fresh kernel: :attr:`ExecutionResult.state_lost` and a
  :attr:`ExecutionResult.notice` say so.
- **Environment.** ``env`` holds for one cell; nothing from the host, never the API key.
- **Packages.** :meth:`Kernel.install` makes new packages importable in the running namespace;
  a failure is an :class:`ExecutionError` named ``PipError``.
- **Cancellation** interrupts the cell, keeps the kernel, and propagates; a cell that ignores it
  is killed by the next call after ``grace``, which then reports ``state_lost``.
- **Untrusted guest.** Every frame is validated (:mod:`lizard_core._kernel_frames`) and every
  size bounded (:mod:`lizard_core._spill`); anything else is a
  :class:`~lizard_core.errors.GuestProtocolError`, and the kernel serves the next call.
- **Concurrency.** One cell at a time (calls queue); :meth:`interrupt`, :meth:`restart` and
  :meth:`close` do not wait for it. ``name`` lets several kernels share one sandbox, each on a
  Unix socket in a 0700 directory under ``$TMPDIR``.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import posixpath
import re
import threading
import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from lizard_core._guest import program
from lizard_core._kernel_frames import check_end
from lizard_core._kernel_results import (
    OUTPUT_CUT_MARKER,
    Assembler,
    ExecutionError,
    ExecutionResult,
    OutputCallback,
    RichResult,
)
from lizard_core._spill import read_spill
from lizard_core._staging import STAGE_OVER_BYTES, encode_body, stage_body
from lizard_core._wire import KERNEL_STREAM_BUDGET, KernelEnd
from lizard_core.checks import check_env, check_seconds
from lizard_core.closing import ClosesOnExit
from lizard_core.errors import (
    GuestProtocolError,
    KernelUnavailableError,
    SandboxGoneError,
)
from lizard_core.guest import (
    JOBS_ROOT,
    Cancellation,
    Frame,
    arun_cancellable,
    loop_callback,
    run_guest,
    schedule_cleanup,
)
from lizard_core.session import Session
from lizard_core.streaming import Emit, OutputStream

__all__ = [
    "DEFAULT_GRACE_S",
    "DEFAULT_MAX_OUTPUT_BYTES",
    "DEFAULT_MAX_RESULT_BYTES",
    "OUTPUT_CUT_MARKER",
    "STREAM_BUDGET",
    "ExecutionError",
    "ExecutionResult",
    "Kernel",
    "KernelUnavailableError",
    "OutputCallback",
    "RichResult",
]

DEFAULT_GRACE_S: Final = 3.0
"""How long an interrupted cell has to stop before the kernel is restarted."""
DEFAULT_MAX_OUTPUT_BYTES: Final = 1024 * 1024
"""Output kept per cell (both streams together) before the rest is dropped with a marker."""
DEFAULT_MAX_RESULT_BYTES: Final = 4 * 1024 * 1024
"""Characters kept per rich value (images count as base64)."""
STREAM_BUDGET: Final = KERNEL_STREAM_BUDGET
"""The kernel call's inline budget (:data:`lizard_core._wire.KERNEL_STREAM_BUDGET`)."""
START_ALLOWANCE_S: Final = 60.0
"""Time allowed for starting the kernel daemon (a first call, or a restart after a kill)."""
_DEADLINE_MARGIN_S: Final = 2 * START_ALLOWANCE_S + 30.0
_NAME: Final = re.compile(r"[A-Za-z0-9_-]{1,32}")


@functools.cache
def _daemon_payload() -> tuple[str, str]:
    """(version, zlib+base64 program) of the guest daemon: its compact form, quicker to start."""
    text = program("kernel_daemon").encode("utf-8")
    return hashlib.sha256(text).hexdigest()[:16], base64.b64encode(zlib.compress(text, 9)).decode()


def _limit(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if value < 1024:
        raise ValueError(f"{name} must be at least 1024, not {value}")
    return value


def _text(name: str, value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, not {type(value).__name__}")
    if "\0" in value:
        raise ValueError(f"{name} must not contain NUL characters")
    return value


def _callback(on_output: object) -> OutputCallback | None:
    if on_output is not None and not callable(on_output):
        raise TypeError("on_output must be callable or None")
    return on_output


def _in_loop(on_output: OutputCallback | None) -> OutputCallback | None:
    """``on_output`` run in the calling event loop's thread, in order (call from async code)."""
    if on_output is None:
        return None
    callback = on_output

    def unpack(item: tuple[str, str]) -> None:
        callback(*item)

    relay = loop_callback(unpack)
    assert relay is not None

    def call(stream: str, text: str) -> None:
        relay((stream, text))

    return call


_REPLACED_ELSEWHERE: Final = (
    "The Python kernel was restarted since the previous call (by another client of this "
    "sandbox); its variables, imports and functions are lost."
)


_Body = tuple[Frame, bytes]
"""A request body and its JSON, checked for size before any request."""


def _body(body: Frame) -> _Body:
    return body, encode_body(body)


class Kernel(ClosesOnExit):
    """A persistent Python namespace in the sandbox of ``session``.

    See the module docstring for the contract. Use it as a (sync or async) context manager to
    :meth:`close` it on exit; the session is left as it is. ``name`` tells kernels sharing one
    sandbox apart (the first call under a name fixes its daemon's ``cwd``);
    ``cwd`` is the kernel's working directory (created if missing; default: the exec's, the
    user's home). ``grace`` is how long an interrupted cell has to stop before the kernel is
    restarted. ``max_output_bytes`` caps each cell's output (both streams), ``max_result_bytes``
    each rich value.
    """

    def __init__(
        self,
        session: Session,
        *,
        name: str = "default",
        cwd: str | None = None,
        grace: float = DEFAULT_GRACE_S,
        max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
        max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES,
    ) -> None:
        if not isinstance(session, Session):
            raise TypeError(f"session must be a lizard_core Session, not {type(session).__name__}")
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise ValueError("name must be 1-32 characters of A-Z, a-z, 0-9, '_' or '-'")
        if cwd is not None:
            cwd = _text("cwd", cwd)
            if not cwd.startswith("/"):
                raise ValueError(f"cwd must be an absolute path, not {cwd!r}")
        self._session = session
        self._name = name
        self._cwd = cwd
        self._grace = check_seconds(grace, name="grace")
        self._max_output = _limit("max_output_bytes", max_output_bytes)
        self._max_result = _limit("max_result_bytes", max_result_bytes)
        self._lock = threading.Lock()
        self._kernel_id: str | None = None
        # The session's fresh boots this kernel has accounted for (see _lost_notice).
        self._boots_seen = 0
        # After one answered call the sandbox holds this daemon version: stop sending its source.
        self._daemon_sent = False

    @property
    def session(self) -> Session:
        """The session whose sandbox holds this kernel."""
        return self._session

    @property
    def name(self) -> str:
        """The kernel's name within its sandbox."""
        return self._name

    def __repr__(self) -> str:
        return f"Kernel(name={self._name!r}, sandbox_id={self._session.sandbox_id!r})"

    # ── cells ────────────────────────────────────────────────────────────

    def execute(
        self,
        code: str,
        *,
        timeout: float,
        env: Mapping[str, str] | None = None,
        on_output: OutputCallback | None = None,
    ) -> ExecutionResult:
        """Run ``code`` as one cell and return its outcome (blocking).

        ``timeout`` (seconds) interrupts the cell; see the module docstring for what follows.
        Raises :class:`~lizard_core.errors.SandboxGoneError`,
        :class:`~lizard_core.errors.GuestProtocolError` (the answer was lost; the cell may have
        run), :class:`KernelUnavailableError` and the session's other errors; a cell's own
        failure is never raised, it is :attr:`ExecutionResult.error`.
        """
        body = self._cell_body(code, timeout, env)
        callback = _callback(on_output)
        sandbox = self._session.sandbox()
        return self._call(sandbox, body, callback, None)

    async def aexecute(
        self,
        code: str,
        *,
        timeout: float,  # noqa: ASYNC109 - the cell's limit, enforced in the guest
        env: Mapping[str, str] | None = None,
        on_output: OutputCallback | None = None,
    ) -> ExecutionResult:
        """Async :meth:`execute`; ``on_output`` runs in the event loop's thread.

        Cancelling the task interrupts the cell (the kernel and its namespace stay).
        """
        body = self._cell_body(code, timeout, env)
        callback = _in_loop(_callback(on_output))
        sandbox = await self._session.asandbox()
        return await arun_cancellable(lambda cancel: self._call(sandbox, body, callback, cancel))

    def stream(
        self, code: str, *, timeout: float, env: Mapping[str, str] | None = None
    ) -> OutputStream[ExecutionResult]:
        """:meth:`execute` as a stream of its output (UTF-8 chunks), then its result.

        Iterate with ``for`` or ``async for`` (see :mod:`lizard_core.streaming`); stopping the
        iteration early interrupts the cell as cancelling :meth:`aexecute` does.
        """
        body = self._cell_body(code, timeout, env)

        def work(sandbox: Any, cancel: Cancellation, emit: Emit) -> ExecutionResult:
            def on_output(stream: str, text: str) -> None:
                emit("stderr" if stream == "stderr" else "stdout", text.encode())

            return self._call(sandbox, body, on_output, cancel)

        return OutputStream(self._session, work)

    def install(
        self,
        packages: Sequence[str],
        *,
        timeout: float = 600.0,
        pip_args: Sequence[str] = (),
        on_output: OutputCallback | None = None,
    ) -> ExecutionResult:
        """``pip install`` ``packages`` into the running kernel (blocking).

        Packages are passed after ``--``, never through a shell. ``pip_args`` go before them
        (e.g. ``["--user"]``, ``["--no-index", "--find-links", "/wheels"]``). On failure the
        result's error is ``PipError`` (or ``TimeoutError``) and pip's output is in ``stdout``
        and the error's traceback. The per-cell timeout does not apply.
        """
        body = self._install_body(packages, timeout, pip_args)
        callback = _callback(on_output)
        sandbox = self._session.sandbox()
        return self._call(sandbox, body, callback, None)

    async def ainstall(
        self,
        packages: Sequence[str],
        *,
        timeout: float = 600.0,  # noqa: ASYNC109 - pip's limit, enforced in the guest
        pip_args: Sequence[str] = (),
        on_output: OutputCallback | None = None,
    ) -> ExecutionResult:
        """Async :meth:`install`."""
        body = self._install_body(packages, timeout, pip_args)
        callback = _in_loop(_callback(on_output))
        sandbox = await self._session.asandbox()
        return await arun_cancellable(lambda cancel: self._call(sandbox, body, callback, cancel))

    def _cell_body(self, code: object, timeout: object, env: object) -> _Body:
        if not isinstance(code, str):
            raise TypeError(f"code must be a str, not {type(code).__name__}")
        return _body(
            {
                "op": "execute",
                "code": code,
                "timeout": check_seconds(timeout, name="timeout"),
                "grace": self._grace,
                "env": check_env(env),
                "max_output": self._max_output,
                "max_result": self._max_result,
                "budget": KERNEL_STREAM_BUDGET,
            }
        )

    def _install_body(self, packages: object, timeout: object, pip_args: object) -> _Body:
        if isinstance(packages, str) or not isinstance(packages, Sequence):
            raise TypeError("packages must be a sequence of requirement strings")
        if isinstance(pip_args, str) or not isinstance(pip_args, Sequence):
            raise TypeError("pip_args must be a sequence of strings")
        names = [_text("package", p) for p in packages]
        if not names or any(not p.strip() or "\n" in p for p in names):
            raise ValueError("packages must be one or more non-empty requirement strings")
        return _body(
            {
                "op": "install",
                "packages": names,
                "pip_args": [_text("pip argument", a) for a in pip_args],
                "timeout": check_seconds(timeout, name="timeout"),
                "max_output": self._max_output,
                "budget": KERNEL_STREAM_BUDGET,
            }
        )

    def _call(
        self,
        sandbox: Any,
        request: _Body,
        on_output: OutputCallback | None,
        cancel: Cancellation | None,
    ) -> ExecutionResult:
        """The blocking body shared by the sync and async faces.

        One request; two when the sandbox lost the daemon's source file (it is sent again). A
        body too large for argv is uploaded first (see :mod:`lizard_core._staging`).
        """
        body, encoded = request
        self._acquire(cancel)
        job = None
        try:
            staged = None
            if len(encoded) > STAGE_OVER_BYTES:
                job, staged = stage_body(self._session, sandbox, encoded)
            while True:
                assembler = Assembler(on_output, self._max_output, self._max_result)
                allowance = float(body["timeout"]) + self._grace + _DEADLINE_MARGIN_S
                final = self._run(
                    sandbox,
                    "execute" if body["op"] == "execute" else "install",
                    body,
                    on_frame=assembler.feed,
                    deadline_s=allowance,
                    cancel=cancel,
                    staged=staged,
                )
                if final.get(KernelEnd.NEED_SOURCE):
                    self._daemon_sent = False
                    continue
                break
            if final.get(KernelEnd.SPILL):
                self._read_spill(sandbox, str(final[KernelEnd.SPILL]), assembler)
            error = final.get(KernelEnd.ERROR)
            if (
                assembler.kernel_id is None
                and error
                and error[KernelEnd.ERROR_NAME] == "KernelUnavailable"
            ):
                raise KernelUnavailableError(
                    "The Python kernel could not be started in the sandbox: "
                    f"{error[KernelEnd.ERROR_MESSAGE]}"
                )
            lost_notice = self._lost_notice(final, assembler)
            result = assembler.result(final, lost_notice)
            # An end frame written by the client (the kernel was killed or died) names no
            # kernel: the next call runs in a fresh one whose id is not known yet.
            self._kernel_id = final.get(KernelEnd.KERNEL_ID)
            return result
        finally:
            if job is not None:
                schedule_cleanup(sandbox, job)
            self._lock.release()

    def _lost_notice(self, final: Frame, assembler: Assembler) -> str | None:
        """Why this call's kernel is not the one earlier calls built, when nobody said so.

        A kernel other than the one the previous call saw means it was restarted in between:
        by a fresh boot of the sandbox (a resume, or a start from a snapshot or fork: the
        session counts them) or by another client. A first call after such a boot that finds a
        fresh kernel (its first cell) reports the boot too. Where the platform keeps memory
        the kernel carries on, and nothing is reported.
        """
        boots = self._session.boot_epoch
        booted, self._boots_seen = boots != self._boots_seen, boots
        if final.get(KernelEnd.STATE_LOST):
            # The client found its kernel dead; after a boot, the boot is why.
            if booted and self._session.boot_notice:
                final[KernelEnd.NOTICE] = self._session.boot_notice
            return None
        current = final.get(KernelEnd.KERNEL_ID) or assembler.kernel_id
        if self._kernel_id is not None:
            if current is None or current == self._kernel_id:
                return None
            return (self._session.boot_notice if booted else None) or _REPLACED_ELSEWHERE
        fresh = int(final.get(KernelEnd.COUNT) or assembler.count) <= 1
        return self._session.boot_notice if booted and fresh else None

    def _read_spill(self, sandbox: Any, path: str, assembler: Assembler) -> None:
        """Feed the frames the guest wrote to a file past the streamed budget (one request)."""
        job = posixpath.dirname(path)
        if posixpath.dirname(job) != JOBS_ROOT or posixpath.basename(path) != "frames":
            raise GuestProtocolError(f"The kernel named an unexpected spill file: {path!r}")
        try:
            read_spill(
                self._session,
                sandbox,
                path,
                max_bytes=assembler.spill_budget,
                on_frame=assembler.feed,
            )
        finally:
            schedule_cleanup(sandbox, job)  # removed by the next guest request, at no cost

    def _acquire(self, cancel: Cancellation | None) -> None:
        # Waits for a running cell; a cancelled async caller stops waiting.
        while not self._lock.acquire(timeout=0.1):
            if cancel is not None and cancel.cancelled:
                raise GuestProtocolError("Cancelled while waiting for the kernel's running cell.")

    def _run(
        self,
        sandbox: Any,
        op: str,
        body: Frame | None,
        *,
        on_frame: Callable[[Frame], None] | None = None,
        deadline_s: float = START_ALLOWANCE_S + 30.0,
        cancel: Cancellation | None = None,
        staged: list[str] | None = None,
    ) -> Frame:
        version, payload = _daemon_payload()
        request: Frame = {"start_timeout": START_ALLOWANCE_S}
        if staged:
            request["staged"] = staged
        elif body is not None:
            request["body"] = body
        # Plain argv items after the request: the client starts the daemon before it parses
        # JSON (see kernel_client's docstring).
        named = [op, self._key(sandbox), version, self._cwd or "", ""]
        if not self._daemon_sent:
            named[-1] = payload
        final = run_guest(
            sandbox,
            request,
            on_frame=on_frame,
            data_args=named,
            program_name="kernel_client",
            session=self._session,
            exec_timeout_s=deadline_s + 30.0,
            deadline_s=deadline_s,
            cancel=cancel,
        )
        check_end(final)
        if not final.get(KernelEnd.NEED_SOURCE):
            self._daemon_sent = True
        return final

    def _key(self, sandbox: Any) -> str:
        # The sandbox id keeps kernels apart where sandboxes share /tmp (lizard-local's host mode);
        # its lineage's first id lets a fork that keeps memory find its source's kernel.
        sandbox_id = str(self._session.lineage_id or sandbox.sandbox_id)
        if not re.fullmatch(r"[A-Za-z0-9_.-]{1,40}", sandbox_id) or sandbox_id.startswith("."):
            sandbox_id = hashlib.sha256(sandbox_id.encode()).hexdigest()[:20]
        return f"{self._name}-{sandbox_id}"

    # ── control ──────────────────────────────────────────────────────────

    def interrupt(self) -> bool:
        """Send KeyboardInterrupt to the running cell; True if a kernel was running.

        Costs one request; makes none when the session has no sandbox yet.
        """
        sandbox = self._existing_sandbox()
        if sandbox is None:
            return False
        return bool(self._run(sandbox, "interrupt", None).get(KernelEnd.RUNNING))

    async def ainterrupt(self) -> bool:
        """Async :meth:`interrupt`."""
        if self._session.sandbox_id is None or self._session.destroyed:
            return False
        sandbox = await self._session.asandbox()
        return await arun_cancellable(
            lambda _: bool(self._run(sandbox, "interrupt", None).get(KernelEnd.RUNNING))
        )

    def restart(self) -> None:
        """Kill the kernel (its whole process group) and start a fresh one; state is lost.

        A cell running meanwhile ends with a ``KernelDied`` error.
        """
        sandbox = self._session.sandbox()
        self._restart(sandbox)

    async def arestart(self) -> None:
        """Async :meth:`restart`."""
        sandbox = await self._session.asandbox()
        await arun_cancellable(lambda _: self._restart(sandbox))

    def _restart(self, sandbox: Any) -> None:
        assembler = Assembler(None, self._max_output, self._max_result)
        for _ in range(2):
            final = self._run(sandbox, "restart", None, on_frame=assembler.feed)
            if not final.get(KernelEnd.NEED_SOURCE):
                break
            self._daemon_sent = False
        error = final.get(KernelEnd.ERROR)
        if error is not None:
            raise KernelUnavailableError(
                "The Python kernel could not be restarted in the sandbox: "
                f"{error[KernelEnd.ERROR_MESSAGE]}"
            )
        self._kernel_id = assembler.kernel_id

    def close(self) -> None:
        """Stop the kernel and remove its directory in the sandbox; idempotent.

        Makes no request when the session never had a sandbox; a sandbox already gone counts as
        closed. The session (and its sandbox) stay open.
        """
        sandbox = self._existing_sandbox()
        if sandbox is None:
            return
        with contextlib.suppress(SandboxGoneError):
            self._run(sandbox, "close", None)
        self._kernel_id = None

    async def aclose(self) -> None:
        """Async :meth:`close`."""
        if self._session.sandbox_id is None or self._session.destroyed:
            return
        try:
            sandbox = await self._session.asandbox()
            await arun_cancellable(lambda _: self._run(sandbox, "close", None))
        except SandboxGoneError:
            pass
        self._kernel_id = None

    def _existing_sandbox(self) -> Any:
        if self._session.sandbox_id is None or self._session.destroyed:
            return None
        try:
            return self._session.sandbox()
        except SandboxGoneError:
            return None
