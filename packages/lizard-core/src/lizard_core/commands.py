"""Run a command in the sandbox: exact bytes, exit code, timeout, output limit, cancellation.

What holds (tested against lizard-local in ``tests/test_commands.py``):

- **Form.** An argv sequence runs as is (``PATH`` lookup, no shell); a string needs
  ``shell=True`` and runs under ``/bin/sh -c``. Bad arguments raise TypeError/ValueError, and a
  command too large to start (:data:`ARG_MAX_ONE`, :data:`ARGV_BUDGET`) ``OSError(E2BIG)``,
  before any request.
- **Working directory.** ``cwd`` must exist (``create_cwd=True`` makes it, like ``mkdir -p``);
  :attr:`CommandResult.cwd` reports it absolute with symlinks resolved.
- **Environment.** The sandbox's own plus exactly ``env``, for the command only; nothing from
  the host.
- **Input.** stdin is at EOF, or ``input`` then EOF; a command that stops reading early is fine.
- **User.** ``user`` runs as that account (needs a root default user); a switch that cannot be
  made starts nothing: exit code 126, the reason on stderr, :attr:`CommandResult.start_errno`.
- **Result.** The real exit code (non-zero is a result, not an error; 127 missing, 126 not
  executable, 128 + N killed by signal N) and stdout/stderr as exact bytes.
- **Completion.** When the command exits and its pipes drain, after a short grace if a
  background child keeps them open; such a child is left running.
- **Timeout** is enforced in the guest: the process group is killed and
  :class:`~lizard_core.errors.CommandTimeoutError` carries the output so far. The host gives up
  :data:`DEADLINE_MARGIN_S` later if the guest does not answer.
- **Output limit.** Past ``output_limit`` bytes on a stream the command is killed and
  :class:`~lizard_core.errors.OutputLimitError` carries what was kept; never cut silently.
- **Cost.** One request when input fits :data:`INPUT_INLINE` and output the stream budget
  (``docs/architecture.md``); larger input is uploaded first, one ``POST files`` per
  :data:`~lizard_core.files.CHUNK_SIZE`; spilled output costs one ``GET files`` per stream.
  Cleanup rides on the next guest request.
- **A sandbox gone mid-command** raises :class:`~lizard_core.errors.SandboxGoneError` (see
  :mod:`lizard_core.guest`).
- **Live output.** ``on_stdout`` / ``on_stderr`` get each chunk as it arrives (spilled output at
  the end); with :func:`arun_command` in the event loop's thread. :func:`stream_command` gives
  the same chunks as a sync or async iterator (:class:`~lizard_core.streaming.OutputStream`)
  that ends with the :class:`CommandResult`.
- **Cancellation** (of :func:`arun_command`'s task, or Ctrl-C in :func:`run_command`) stops the
  command's foreground process group, waits for the guest, then propagates. Processes detached
  into a session of their own are not touched.
"""

from __future__ import annotations

import base64
import dataclasses
import errno
import json
import math
import os
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from lizard_core._guest import program
from lizard_core._guest_relay import overhead
from lizard_core._spill import fetch_bounded
from lizard_core._staging import stage_body
from lizard_core._wire import AGENT_STREAM_BUDGET, AgentEnd, AgentFrame, GuestFrame
from lizard_core.checks import check_absolute_path, check_env, check_seconds
from lizard_core.errors import CommandTimeoutError, GuestProtocolError, OutputLimitError
from lizard_core.guest import (
    Cancellation,
    Frame,
    arun_cancellable,
    check_outcome,
    encode_args,
    is_job_file,
    loop_callback,
    run_guest,
    schedule_cleanup,
)
from lizard_core.session import Session
from lizard_core.streaming import Emit, OutputStream

__all__ = [
    "ARGV_BUDGET",
    "ARG_MAX_ONE",
    "DEADLINE_MARGIN_S",
    "DEFAULT_OUTPUT_LIMIT",
    "INPUT_INLINE",
    "STREAM_BUDGET",
    "UNTIMED_EXEC_S",
    "CommandResult",
    "arun_command",
    "run_command",
    "stream_command",
]

DEFAULT_OUTPUT_LIMIT: Final = 10 * 1024 * 1024
"""Bytes kept per stream before :class:`~lizard_core.errors.OutputLimitError`."""
STREAM_BUDGET: Final = AGENT_STREAM_BUDGET
"""The command agent's inline budget (:data:`lizard_core._wire.AGENT_STREAM_BUDGET`)."""
DEADLINE_MARGIN_S: Final = 15.0
"""How long after ``timeout`` the host waits for the guest's answer before giving up."""
UNTIMED_EXEC_S: Final = 3600.0
"""The platform's limit for a command run without ``timeout`` (the exec must name one)."""
INPUT_INLINE: Final = 512 * 1024
"""Bytes of ``input`` (with the command line: together at most this) carried in the exec's argv;
more is uploaded first. Half the files' inline budget, leaving room for a long command line."""
_EXEC_MARGIN_S: Final = 30.0
ARG_MAX_ONE: Final = 128 * 1024
"""Linux's limit for one argument or environment string, its NUL included (MAX_ARG_STRLEN)."""
ARGV_BUDGET: Final = 2 * 1024 * 1024 - 128 * 1024
"""Bytes of the guest's argv a command may take: Linux's 2 MiB for argv and environment
together (ARG_MAX with the usual 8 MiB stack), less room for the sandbox's own environment."""

OutputCallback = Callable[[bytes], object]


@dataclass(frozen=True)
class CommandResult:
    """A finished command: its exit code and exact output bytes."""

    exit_code: int
    """The real exit code; 127 missing program, 126 not executable, 128 + N killed by signal N."""
    stdout: bytes
    """Everything the command wrote to stdout."""
    stderr: bytes
    """Everything the command wrote to stderr."""
    cwd: str | None = None
    """The directory the command started in: absolute, symlinks resolved (None only if the
    sandbox could not tell, e.g. its default directory was removed)."""
    start_errno: int | None = None
    """Why the program could not be started (``errno.ENOENT``, ``errno.EACCES``, ``errno.EPERM``
    for a user switch the sandbox does not allow, ...); None when it started."""


@dataclass(frozen=True)
class _Spec:
    argv: list[str]
    cwd: str | None
    create_cwd: bool
    env: dict[str, str]
    timeout: float | None
    output_limit: int
    input: bytes | None = None
    user: str | None = None


def _with_input_and_user(spec: _Spec, input: object, user: object) -> _Spec:
    if input is not None and not isinstance(input, bytes | bytearray | memoryview):
        raise TypeError("input must be bytes or None (encode text first)")
    if user is not None:
        if not isinstance(user, str):
            raise TypeError("user must be a str or None")
        if not user or len(user) > 256 or any(c in user for c in "\0\n:/"):
            raise ValueError(f"user {user!r} is not a user name or uid")
    data = None if input is None else bytes(input)
    return dataclasses.replace(spec, input=data, user=user)


def _validate(
    command: str | Sequence[str],
    shell: bool,
    cwd: str | None,
    create_cwd: bool,
    env: Mapping[str, str] | None,
    timeout: float | None,
    output_limit: int,
    on_stdout: OutputCallback | None,
    on_stderr: OutputCallback | None,
) -> _Spec:
    if type(shell) is not bool:
        raise TypeError("shell must be a bool")
    if isinstance(command, str):
        if not shell:
            raise TypeError("a string command needs shell=True; pass an argv list otherwise")
        argv = ["/bin/sh", "-c", command]
    elif not isinstance(command, Sequence) or isinstance(command, bytes | bytearray):  # type: ignore[unreachable]
        raise TypeError("command must be an argv sequence of str, or a str with shell=True")
    else:
        if shell:
            raise TypeError("shell=True needs a string command; pass an argv list without it")
        argv = list(command)
        if not argv:
            raise ValueError("the argv must not be empty")
        if not all(isinstance(arg, str) for arg in argv):
            raise TypeError("every argv item must be a str")
    if any("\0" in arg for arg in argv):
        raise ValueError("the command must not contain NUL characters")
    if cwd is not None:
        check_absolute_path(cwd, name="cwd")
    if type(create_cwd) is not bool:
        raise TypeError("create_cwd must be a bool")
    if create_cwd and cwd is None:
        raise ValueError("create_cwd=True needs a cwd to create")
    env_dict = check_env(env)
    if timeout is not None:
        timeout = check_seconds(timeout)
    if isinstance(output_limit, bool) or not isinstance(output_limit, int):
        raise TypeError("output_limit must be an int")
    if output_limit <= 0:
        raise ValueError("output_limit must be positive")
    _check_argv_size(argv, env_dict, cwd)
    for name, callback in (("on_stdout", on_stdout), ("on_stderr", on_stderr)):
        if callback is not None and not callable(callback):
            raise TypeError(f"{name} must be callable or None")
    return _Spec(
        argv, cwd, create_cwd, env_dict, None if timeout is None else float(timeout), output_limit
    )


def _too_long(what: str) -> OSError:
    return OSError(errno.E2BIG, f"{os.strerror(errno.E2BIG)}: {what}")


def _check_argv_size(argv: list[str], env: dict[str, str], cwd: str | None) -> None:
    """Refuse, as ``execve`` would, a command that cannot be started in the sandbox.

    Checked on the host before any request: otherwise the guest program itself could not start
    (its request travels in argv, base64-encoded) or the command's ``execve`` would fail.
    """
    strings = [*argv, *(f"{key}={value}" for key, value in env.items())]
    for text in strings:
        if len(text.encode("utf-8", "surrogateescape")) >= ARG_MAX_ONE:
            raise _too_long(f"one argument or variable has {ARG_MAX_ONE} bytes or more")
    request = json.dumps({"argv": argv, "env": env, "cwd": cwd}, separators=(",", ":"))
    carried = 4 * math.ceil(len(request) / 3) + overhead(program("agent"))
    if carried > ARGV_BUDGET:
        raise _too_long(
            f"the command and its environment take {carried} bytes to send, over the "
            f"{ARGV_BUDGET} that one exec can carry; pass large data through a file instead"
        )


def _execute(
    session: Session,
    sandbox: Any,
    spec: _Spec,
    on_stdout: Callable[[bytes], object] | None,
    on_stderr: Callable[[bytes], object] | None,
    cancel: Cancellation | None,
) -> CommandResult:
    """The blocking body shared by the sync and async faces."""
    streams: dict[int, bytearray] = {1: bytearray(), 2: bytearray()}
    callbacks = {1: on_stdout, 2: on_stderr}

    inflaters = {1: zlib.decompressobj(), 2: zlib.decompressobj()}

    def on_frame(frame: Frame) -> None:
        kind = frame[GuestFrame.TYPE]
        if kind not in (AgentFrame.OUTPUT, AgentFrame.OUTPUT_ZLIB):
            return
        # The command can write to the agent's stdout too: frames are checked, not trusted.
        index = frame.get(AgentFrame.STREAM)
        if (
            index not in (1, 2)
            or isinstance(index, bool)
            or not isinstance(frame.get(AgentFrame.DATA), str)
        ):
            raise GuestProtocolError(f"The command agent sent a malformed {kind!r} frame.")
        try:
            data = base64.b64decode(frame[AgentFrame.DATA], validate=True)
        except ValueError:
            raise GuestProtocolError("The command's output arrived damaged.") from None
        if kind == AgentFrame.OUTPUT and len(streams[index]) + len(data) > spec.output_limit:
            raise GuestProtocolError("The command's output passed its limit on the way.")
        if kind == AgentFrame.OUTPUT_ZLIB:
            # At most what the limit lets the guest send, plus one byte to notice more.
            room = spec.output_limit - len(streams[index]) + 1
            inflater = inflaters[index]
            try:
                data = inflater.decompress(data, room)
            except zlib.error as exc:
                raise GuestProtocolError(f"The command's output arrived damaged: {exc}") from exc
            if inflater.unconsumed_tail or len(data) == room:
                raise GuestProtocolError("The command's output passed its limit on the way.")
        streams[index] += data
        callback = callbacks[index]
        if callback is not None:
            callback(data)

    request: dict[str, Any] = {
        "op": "run",
        "argv": spec.argv,
        "cwd": spec.cwd,
        "mkcwd": spec.create_cwd,
        "env": spec.env,
        "timeout": spec.timeout,
        "limit": spec.output_limit,
        "wire": AGENT_STREAM_BUDGET,
    }
    if spec.user is not None:
        request["user"] = spec.user
    data_args: list[str] = []
    input_job: str | None = None
    if spec.input is not None:
        command_size = sum(len(arg) for arg in spec.argv)
        if len(spec.input) + command_size <= INPUT_INLINE:
            request["stdin"] = "inline"
            data_args = encode_args(spec.input)
        else:
            input_job, request["stdin"] = stage_body(session, sandbox, spec.input)
    if spec.timeout is None:
        exec_timeout, deadline = UNTIMED_EXEC_S, None
    else:
        exec_timeout = spec.timeout + _EXEC_MARGIN_S
        deadline = spec.timeout + DEADLINE_MARGIN_S
    try:
        final = check_outcome(
            run_guest(
                sandbox,
                request,
                on_frame=on_frame,
                data_args=data_args,
                exec_timeout_s=exec_timeout,
                deadline_s=deadline,
                cancel=cancel,
                session=session,
            )
        )
    finally:
        if input_job is not None:
            # Whatever the command did not read is removed by the next request.
            schedule_cleanup(sandbox, input_job)
    sp = final.get(AgentEnd.SPILL) or [None, None]
    rc = final.get(AgentEnd.EXIT_CODE)
    if (
        not isinstance(sp, list)
        or len(sp) != 2
        or not all(path is None or is_job_file(path) for path in sp)
        or not isinstance(rc, int)
    ):
        raise GuestProtocolError("The command agent sent a malformed end frame.")
    spilled = [path for path in sp if path]
    try:
        for index, path in zip((1, 2), sp, strict=True):
            if not path:
                continue
            if cancel is not None and cancel.cancelled:
                raise GuestProtocolError("The command was cancelled while its output was fetched.")
            # Never more than the stream's limit leaves room for, whatever the file claims.
            room = spec.output_limit - len(streams[index])
            data = fetch_bounded(session, sandbox, path, max_bytes=room)
            streams[index] += data
            callback = callbacks[index]
            if callback is not None and data:
                callback(data)
    finally:
        for job in {path.rsplit("/", 1)[0] for path in spilled}:
            schedule_cleanup(sandbox, job)
    stdout, stderr = bytes(streams[1]), bytes(streams[2])
    expected = final.get(AgentEnd.COUNT)
    if expected != [len(stdout), len(stderr)]:
        raise GuestProtocolError(
            f"The command's output is incomplete: the guest counted {expected} bytes, "
            f"the host received {[len(stdout), len(stderr)]}."
        )
    if final.get(AgentEnd.TIMED_OUT):
        raise CommandTimeoutError(
            f"The command timed out after {spec.timeout:g} s and was killed.",
            stdout=stdout,
            stderr=stderr,
            timeout=spec.timeout,
        )
    if final.get(AgentEnd.OUTPUT_LIMITED):
        raise OutputLimitError(
            f"The command's output passed {spec.output_limit} bytes on one stream; "
            "it was killed and its output is incomplete.",
            stdout=stdout,
            stderr=stderr,
            limit=spec.output_limit,
        )
    cwd = final.get(AgentEnd.CWD)
    start_errno = final.get(AgentEnd.START_ERRNO)
    return CommandResult(
        exit_code=rc,
        stdout=stdout,
        stderr=stderr,
        cwd=cwd if isinstance(cwd, str) else None,
        start_errno=start_errno if type(start_errno) is int else None,
    )


def run_command(
    session: Session,
    command: str | Sequence[str],
    *,
    shell: bool = False,
    cwd: str | None = None,
    create_cwd: bool = False,
    env: Mapping[str, str] | None = None,
    timeout: float | None = None,
    output_limit: int = DEFAULT_OUTPUT_LIMIT,
    on_stdout: OutputCallback | None = None,
    on_stderr: OutputCallback | None = None,
    input: bytes | None = None,
    user: str | None = None,
) -> CommandResult:
    """Run ``command`` in the session's sandbox and wait for it (blocking).

    See the module docstring for the contract. Raises
    :class:`~lizard_core.errors.CommandTimeoutError`,
    :class:`~lizard_core.errors.OutputLimitError`, ``OSError`` for a bad ``cwd`` (or one
    ``create_cwd=True`` could not create), and the session's errors
    (:class:`~lizard_core.errors.SandboxGoneError`, ...).
    """
    spec = _validate(
        command, shell, cwd, create_cwd, env, timeout, output_limit, on_stdout, on_stderr
    )
    spec = _with_input_and_user(spec, input, user)
    sandbox = session.sandbox()
    return _execute(session, sandbox, spec, on_stdout, on_stderr, None)


async def arun_command(
    session: Session,
    command: str | Sequence[str],
    *,
    shell: bool = False,
    cwd: str | None = None,
    create_cwd: bool = False,
    env: Mapping[str, str] | None = None,
    # The command's own limit, enforced in the guest; a caller's scope cannot replace it.
    timeout: float | None = None,  # noqa: ASYNC109
    output_limit: int = DEFAULT_OUTPUT_LIMIT,
    on_stdout: OutputCallback | None = None,
    on_stderr: OutputCallback | None = None,
    input: bytes | None = None,
    user: str | None = None,
) -> CommandResult:
    """Async :func:`run_command`; cancelling the task stops the command's process group."""
    spec = _validate(
        command, shell, cwd, create_cwd, env, timeout, output_limit, on_stdout, on_stderr
    )
    spec = _with_input_and_user(spec, input, user)
    sandbox = await session.asandbox()
    out, err = loop_callback(on_stdout), loop_callback(on_stderr)
    return await arun_cancellable(lambda cancel: _execute(session, sandbox, spec, out, err, cancel))


def stream_command(
    session: Session,
    command: str | Sequence[str],
    *,
    shell: bool = False,
    cwd: str | None = None,
    create_cwd: bool = False,
    env: Mapping[str, str] | None = None,
    timeout: float | None = None,
    output_limit: int = DEFAULT_OUTPUT_LIMIT,
    input: bytes | None = None,
    user: str | None = None,
) -> OutputStream[CommandResult]:
    """:func:`run_command` as a stream of its output chunks, then its result.

    Arguments are checked now (no request); iterating runs the command, with ``for`` or
    ``async for``. Stopping the iteration early (cancelling its task, Ctrl-C,
    :meth:`~lizard_core.streaming.OutputStream.close`) stops the command's process group.
    What :func:`run_command` raises is raised at the end of the iteration. See
    :mod:`lizard_core.streaming`.
    """
    spec = _validate(command, shell, cwd, create_cwd, env, timeout, output_limit, None, None)
    spec = _with_input_and_user(spec, input, user)

    def work(sandbox: Any, cancel: Cancellation, emit: Emit) -> CommandResult:
        return _execute(
            session,
            sandbox,
            spec,
            lambda data: emit("stdout", data),
            lambda data: emit("stderr", data),
            cancel,
        )

    return OutputStream(session, work)
