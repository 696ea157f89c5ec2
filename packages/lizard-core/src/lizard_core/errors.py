"""One exception hierarchy for every Lizard integration, and the one place that builds it.

Every exception class lizard_core defines is defined here::

    LizardIntegrationError          any failure about the sandbox or the Lizard API
    ├── SandboxGoneError            the sandbox no longer exists (404, expired, killed)
    ├── CredentialsError            the API key was rejected (401) or refused this action (403)
    ├── QuotaError                  payment required (402) or a limit reached (429)
    ├── TransientError              5xx, 408/504, timeouts, dropped connections; may pass
    ├── SandboxStateError           the sandbox's state refuses the call (409): a fork of a
    │   │                           sandbox with a volume, a volume in use, a failed pause
    │   ├── SandboxPausedError      the sandbox is paused: resume it first
    │   └── StateWaitTimeoutError   a pause or resume did not finish in time (also TimeoutError)
    ├── CommandTimeoutError         a command outlived its timeout
    ├── OutputLimitError            a command's output passed its limit
    ├── GuestProtocolError          the guest program's framed answer was missing or malformed
    │   ├── GuestNotStartedError    the exec ended before the guest said a word; nothing ran
    │   └── LineTooLongError        a line from the guest passed its bound
    ├── GuestCancelledError         a guest call was cancelled and the guest stopped
    ├── KernelUnavailableError      the kernel could not be started or reached; no cell ran
    └── ArchiveCommandError         tar failed in the sandbox (exit code and stderr attached)

    UnsafeArchiveError              a tar to unpack was refused on the host (also ValueError)

    ReadAbandonedError              internal signal of the file transport (a plain ``Exception``,
                                    never raised to callers)

Contract:

- Everything lizard_core raises about the sandbox or the API is a
  :class:`LizardIntegrationError`. The subclasses are the kinds a caller acts on:

  ========================  ==================================================================
  :class:`SandboxGoneError`  the sandbox no longer exists (404, expired, killed); never
                             replaced silently
  :class:`CredentialsError`  the API key was rejected (401, 403); carries no provider text
  :class:`QuotaError`        payment required (402) or a limit reached (429); ``retry_after``
                             and ``url`` say when to retry and which page to open
  :class:`TransientError`    5xx, 408/504, timeouts and dropped connections; may succeed later
  :class:`SandboxStateError` a conflict with the sandbox's state (409); ``code`` says which
  :class:`CommandTimeoutError`  a command outlived its timeout; partial output attached
  :class:`OutputLimitError`  a command's output passed its limit; partial output attached
  :class:`GuestProtocolError`  the guest program's framed answer was missing or malformed
  ========================  ==================================================================

  Other API failures (400, 501, SDK-side checks such as an unknown project) are the base
  class itself, with ``status_code`` and ``code`` when the API sent them.
- :func:`translate` maps every lizard-sdk exception class and every httpx error to one of
  these; :func:`translated` is the context manager that does it around a block of SDK calls and
  re-raises with ``raise ... from exc``. For credentials errors the chain is cut
  (``from None``) so that no provider text reaches a traceback.
- A 2xx answer whose body the SDK cannot read (its ``KeyError``, ``JSONDecodeError``, ...;
  see :data:`MALFORMED_ANSWER`) is a base :class:`LizardIntegrationError` from
  :func:`malformed_answer` at the calls that parse a body (create, the liveness check).
- No message contains an API key: every text taken from the SDK passes through
  :func:`lizard_core._redact.redact`, which also scrubs the chained SDK exception in place.
- A 404 means "sandbox gone" here, except for a create (``creating=True``), where no sandbox
  existed yet. An operation whose own target can be missing (reading a file) must catch
  ``lizard.NotFoundError`` before translating, and tell a missing target from a missing
  sandbox by the platform's code (``SANDBOX_NOT_FOUND``), or without one by asking whether
  the sandbox exists, never by the text, which may name a file called ``sandbox_notes.txt``.
"""

from __future__ import annotations

import contextlib
import errno
import json
import re
from collections.abc import Iterator
from typing import Final

import httpx
import lizard

from lizard_core._redact import redact

__all__ = [
    "MALFORMED_ANSWER",
    "ArchiveCommandError",
    "CommandTimeoutError",
    "CredentialsError",
    "GuestCancelledError",
    "GuestNotStartedError",
    "GuestProtocolError",
    "KernelUnavailableError",
    "LineTooLongError",
    "LizardIntegrationError",
    "OutputLimitError",
    "PathRefusedError",
    "QuotaError",
    "SandboxGoneError",
    "SandboxPausedError",
    "SandboxStateError",
    "SetupFailedError",
    "StateWaitTimeoutError",
    "TransientError",
    "UnsafeArchiveError",
    "malformed_answer",
    "translate",
    "translated",
]

_MAX_DETAIL: Final = 500
_CODE: Final = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{0,63}")


class LizardIntegrationError(Exception):
    """Base class of every error lizard_core raises about a sandbox or the Lizard API.

    ``status_code`` is the HTTP status when the failure came from the API, and ``code`` the
    platform's machine-readable error code when it sent one (branch on it, not on the text).
    """

    def __init__(
        self, message: str, *, status_code: int | None = None, code: str | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status_code = status_code
        self.code = code


class SandboxGoneError(LizardIntegrationError):
    """The sandbox no longer exists: killed, expired, or never existed under that id.

    Never answered by creating a replacement; ``sandbox_id`` names the sandbox when known.
    """

    def __init__(
        self,
        message: str = "The sandbox no longer exists (killed or expired).",
        *,
        sandbox_id: str | None = None,
        status_code: int | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message, status_code=status_code, code=code)
        self.sandbox_id = sandbox_id


class CredentialsError(LizardIntegrationError):
    """Lizard rejected the API key (401) or refused it this action (403).

    The provider's text is never included (it could echo the key); ``code`` carries the
    platform's error code, e.g. ``TRIAL_SANDBOX_SIZE``, when there is one.
    """


class QuotaError(LizardIntegrationError):
    """Payment is required (402) or an account limit was reached (429).

    ``retry_after`` is the number of seconds after which a retry may succeed (429 rate limits),
    ``url`` the page to open to pay or raise the limit (402); either may be None.
    """

    def __init__(
        self,
        message: str,
        *,
        retry_after: float | None = None,
        url: str | None = None,
        status_code: int | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message, status_code=status_code, code=code)
        self.retry_after = retry_after
        self.url = url


class TransientError(LizardIntegrationError):
    """A failure that may pass: 5xx, 408/504, a timeout or a dropped connection.

    Idempotent calls are retried on it with backoff; a create never is, because the sandbox may
    have been made before the failure. ``retry_after`` is set when the server said when to
    retry.
    """

    def __init__(
        self,
        message: str,
        *,
        retry_after: float | None = None,
        status_code: int | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message, status_code=status_code, code=code)
        self.retry_after = retry_after


class SandboxStateError(LizardIntegrationError):
    """The sandbox's state refuses the call (HTTP 409, or found so before asking).

    A fork of a sandbox with a volume attached, a volume attached to another sandbox, a pause
    the platform reports as failed. ``code`` carries the platform's code when it sent one.
    """


class SandboxPausedError(SandboxStateError):
    """The sandbox is paused: commands and files are refused until it is resumed.

    A :class:`~lizard_core.session.Session` resumes a sandbox it paused itself before the next
    operation; this is raised when something else paused it under a call.
    """


class StateWaitTimeoutError(SandboxStateError, TimeoutError):
    """A pause or resume did not reach its state within the session's bounded wait."""


class SetupFailedError(LizardIntegrationError):
    """A setup command (:func:`lizard_core.prepared.prepare_snapshot`) exited non-zero.

    ``exit_code`` is its exit code; ``output`` the head and tail of its stdout and stderr.
    """

    def __init__(self, message: str, *, exit_code: int, output: str) -> None:
        super().__init__(message)
        self.exit_code = exit_code
        self.output = output


class _PartialOutputError(LizardIntegrationError):
    """A command error that keeps the output produced before it stopped."""

    def __init__(
        self,
        message: str,
        *,
        stdout: bytes = b"",
        stderr: bytes = b"",
        status_code: int | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message, status_code=status_code, code=code)
        self.stdout = stdout
        self.stderr = stderr


class CommandTimeoutError(_PartialOutputError):
    """A command outlived its timeout and was stopped.

    ``stdout`` and ``stderr`` hold the exact bytes produced before it stopped; ``timeout`` is
    the limit in seconds when known.
    """

    def __init__(
        self,
        message: str = "The command timed out.",
        *,
        stdout: bytes = b"",
        stderr: bytes = b"",
        timeout: float | None = None,
    ) -> None:
        super().__init__(message, stdout=stdout, stderr=stderr)
        self.timeout = timeout


class OutputLimitError(_PartialOutputError):
    """A command's output passed its limit; the result is incomplete and never a success.

    ``stdout`` and ``stderr`` hold the bytes kept up to the limit; ``limit`` is the limit in
    bytes when known.
    """

    def __init__(
        self,
        message: str = "The command's output exceeded its limit.",
        *,
        stdout: bytes = b"",
        stderr: bytes = b"",
        limit: int | None = None,
    ) -> None:
        super().__init__(message, stdout=stdout, stderr=stderr)
        self.limit = limit


class GuestProtocolError(LizardIntegrationError):
    """The guest program's answer was missing, cut short or malformed.

    Raised instead of returning a result that cannot be proven complete.
    """


class GuestNotStartedError(GuestProtocolError):
    """The exec ended before the guest program said a word: nothing of the request ran."""


class LineTooLongError(GuestProtocolError):
    """A line passed its bound; the stream was not read further."""


class GuestCancelledError(LizardIntegrationError):
    """A guest call was cancelled through its ``Cancellation``; the guest was stopped."""


class KernelUnavailableError(LizardIntegrationError):
    """The kernel could not be started or reached in the sandbox (nothing of the cell ran)."""


class ArchiveCommandError(LizardIntegrationError):
    """``tar`` failed in the sandbox while packing or unpacking a directory."""

    def __init__(self, message: str, *, exit_code: int, stderr: bytes) -> None:
        super().__init__(message)
        self.exit_code = exit_code
        self.stderr = stderr


class UnsafeArchiveError(ValueError):
    """A tar was refused before anything of it was unpacked: ``member`` and ``reason`` say why."""

    def __init__(self, member: str, reason: str) -> None:
        super().__init__(f"unsafe archive member {member!r}: {reason}")
        self.member = member
        self.reason = reason


class PathRefusedError(PermissionError):
    """A resolver refused a path (``lizard_core.resolved_files``).

    ``exit_code`` and ``detail`` (the resolver's stderr) say why.
    """

    def __init__(self, exit_code: int, detail: str) -> None:
        super().__init__(errno.EACCES, f"path refused (resolver exit {exit_code}): {detail}")
        self.exit_code = exit_code
        self.detail = detail


class ReadAbandonedError(Exception):
    """A guarded ``GET files`` was abandoned before its body was read.

    Either no response headers came within its ``headers_timeout``, or the body had no length
    (a device could stream it without end). Internal: the file transport's callers turn it into
    their own fallback or error.
    """


def _detail(text: str) -> str:
    text = redact(text).strip()
    if len(text) > _MAX_DETAIL:
        text = text[:_MAX_DETAIL] + "…"
    return text


def _safe_code(code: object) -> str | None:
    # Codes are identifiers like TRIAL_SANDBOX_SIZE; anything else is free text and dropped.
    if isinstance(code, str) and _CODE.fullmatch(code):
        return redact(code) if redact(code) == code else None
    return None


def _seconds(value: object) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
        return float(value)
    return None


def _from_status(
    status: int, message: str, *, code: str | None, sandbox_id: str | None
) -> LizardIntegrationError:
    """Map an HTTP status with an already redacted message."""
    # The SDK's own prefix would repeat ours ("Lizard API error 503 ...: API error 503: ...").
    message = message.removeprefix(f"API error {status}: ")
    if status in (401, 403):
        return _credentials(status, code)
    if status == 404:
        return SandboxGoneError(
            f"The sandbox {sandbox_id} no longer exists (killed or expired)."
            if sandbox_id
            else "The sandbox no longer exists (killed or expired).",
            sandbox_id=sandbox_id,
            status_code=status,
            code=code,
        )
    if status == 402:
        return QuotaError(f"Payment required: {message}", status_code=status, code=code)
    if status == 409:
        return _conflict(message, code)
    if status == 429:
        return QuotaError(f"Limit reached: {message}", status_code=status, code=code)
    if status in (408, 504) or (status >= 500 and status != 501):
        return TransientError(
            f"Lizard API error {status} (may be temporary): {message}",
            status_code=status,
            code=code,
        )
    return LizardIntegrationError(
        f"Lizard API error {status}: {message}", status_code=status, code=code
    )


def _conflict(message: str, code: str | None) -> SandboxStateError:
    message = message.removeprefix("API error 409: ")
    if code == "SANDBOX_PAUSED" or message.strip() == "Sandbox is paused":
        return SandboxPausedError(
            "The sandbox is paused: resume it before running commands or using files.",
            status_code=409,
            code=code,
        )
    return SandboxStateError(
        f"Conflict with the sandbox's state: {message}", status_code=409, code=code
    )


def _credentials(status: int | None, code: str | None) -> CredentialsError:
    if status == 403:
        text = "Lizard refused this action for the API key (HTTP 403)"
    else:
        text = "Lizard rejected the API key (HTTP 401); check LIZARD_API_KEY"
    if code:
        text += f"; code {code}"
    return CredentialsError(text + ".", status_code=status, code=code)


def _translate_sdk(
    exc: lizard.LizardError, sandbox_id: str | None, creating: bool
) -> LizardIntegrationError:
    status = exc.status_code
    code = _safe_code(exc.code)
    if isinstance(exc, lizard.AuthenticationError):
        return _credentials(status if status in (401, 403) else 401, code)
    message = _detail(str(exc))
    if creating and (status == 404 or isinstance(exc, lizard.NotFoundError)):
        # No sandbox existed yet: what was not found is the project, template, snapshot, ...
        return LizardIntegrationError(
            f"Lizard could not create the sandbox (HTTP 404): {message or 'not found'}. "
            "Check the project, template, region and snapshot asked for.",
            status_code=404,
            code=code,
        )
    if isinstance(exc, lizard.PaymentRequiredError):
        return QuotaError(
            f"Payment required: {_detail(exc.message)}",
            url=exc.url,
            status_code=status if status is not None else 402,
            code=code,
        )
    if isinstance(exc, lizard.LimitExceededError):
        return QuotaError(
            f"Limit reached: {_detail(exc.message)}",
            retry_after=_seconds(exc.retry_after_s),
            status_code=status if status is not None else 429,
            code=code,
        )
    if isinstance(exc, lizard.NotFoundError):
        return _from_status(404, message, code=code, sandbox_id=sandbox_id)
    if isinstance(exc, lizard.TimeoutError):
        return TransientError(
            f"Lizard timed out (may be temporary): {message}",
            status_code=status,
            code=code,
        )
    if isinstance(exc, lizard.ConflictError) or status == 409:
        return _conflict(message, code)
    if status is not None:
        return _from_status(status, message, code=code, sandbox_id=sandbox_id)
    # Raised by the SDK itself (unknown project, unsupported option, runner failure).
    return LizardIntegrationError(message or type(exc).__name__, code=code)


def _translate_httpx(exc: httpx.HTTPError | httpx.InvalidURL) -> LizardIntegrationError:
    name = type(exc).__name__
    if isinstance(exc, httpx.HTTPStatusError):
        status = exc.response.status_code
        return _from_status(status, f"{name}", code=None, sandbox_id=None)
    if isinstance(exc, httpx.UnsupportedProtocol | httpx.LocalProtocolError | httpx.InvalidURL):
        # Our own request was malformed: retrying cannot help.
        return LizardIntegrationError(f"Invalid request to the Lizard API ({name}).")
    if isinstance(exc, httpx.TimeoutException):
        return TransientError(f"The Lizard API did not answer in time ({name}).")
    if isinstance(exc, httpx.TransportError):
        return TransientError(f"Could not reach the Lizard API ({name}): {_detail(str(exc))}")
    # DecodingError, TooManyRedirects, stream misuse: a bad answer, not a passing failure.
    return LizardIntegrationError(f"Unexpected answer from the Lizard API ({name}).")


def translate(
    exc: BaseException, *, sandbox_id: str | None = None, creating: bool = False
) -> LizardIntegrationError:
    """Return the :class:`LizardIntegrationError` for ``exc``.

    Accepts any lizard-sdk exception and any httpx error; a :class:`LizardIntegrationError` is
    returned as is. Anything else becomes a base :class:`LizardIntegrationError` naming its
    type. ``sandbox_id`` names the sandbox in :class:`SandboxGoneError` messages. With
    ``creating`` (the failure of a create), a 404 is the base class naming what the create
    asked for, not :class:`SandboxGoneError`: no sandbox existed to be gone. The result's
    message never contains an API key.
    """
    if isinstance(exc, LizardIntegrationError):
        return exc
    if isinstance(exc, lizard.LizardError):
        return _translate_sdk(exc, sandbox_id, creating)
    if isinstance(exc, httpx.HTTPError | httpx.InvalidURL):
        return _translate_httpx(exc)
    return LizardIntegrationError(f"Unexpected error from the Lizard SDK ({type(exc).__name__}).")


MALFORMED_ANSWER: Final = (KeyError, IndexError, TypeError, AttributeError, json.JSONDecodeError)
"""What lizard-sdk raises when a 2xx answer's body is not what it expects (no ``sandboxId``,
not JSON, a list for an object): catch these around an SDK call that parses a body."""


def malformed_answer(call: str, exc: BaseException) -> LizardIntegrationError:
    """The error for a 2xx answer to ``call`` whose body lizard-sdk could not read."""
    return LizardIntegrationError(
        f"Lizard answered the {call} with a body the SDK could not read "
        f"({type(exc).__name__}); the answer cannot be trusted."
    )


_TRANSLATED_TYPES: Final = (lizard.LizardError, httpx.HTTPError, httpx.InvalidURL)


def _scrub_in_place(exc: BaseException) -> None:
    """Redact keys from an SDK exception that stays chained as ``__cause__``."""
    exc.args = tuple(redact(a) if isinstance(a, str) else a for a in exc.args)
    message = getattr(exc, "message", None)
    if isinstance(message, str):
        exc.message = redact(message)  # type: ignore[attr-defined]


@contextlib.contextmanager
def translated(
    *,
    sandbox_id: str | None = None,
    passthrough: tuple[type[BaseException], ...] = (),
    creating: bool = False,
) -> Iterator[None]:
    """Translate lizard-sdk and httpx exceptions raised in the block.

    Re-raises ``translate(exc) from exc`` (``from None`` for credentials errors, so that no
    provider text is chained). Exceptions that are instances of ``passthrough`` (for example
    ``lizard.NotFoundError`` around a file read, where 404 means "no such file") and all other
    exceptions, including :class:`LizardIntegrationError`, propagate untouched.
    """
    try:
        yield
    except _TRANSLATED_TYPES as exc:
        if passthrough and isinstance(exc, passthrough):
            raise
        error = translate(exc, sandbox_id=sandbox_id, creating=creating)
        if isinstance(error, CredentialsError):
            raise error from None
        _scrub_in_place(exc)
        raise error from exc
