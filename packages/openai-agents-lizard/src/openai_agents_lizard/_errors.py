"""The one place that maps ``lizard_core`` errors onto the OpenAI Agents SDK's sandbox errors.

Contract:

- A command past its timeout is the SDK's ``ExecTimeoutError`` (its shell tool tells the model
  the command timed out); the partial output rides in ``context``.
- A command past the output limit, and every other ``lizard_core`` failure of a command, is an
  ``ExecTransportError``, never a short result. Its ``context`` says whether trying again may
  help (``retryable``): a sandbox that is gone, a rejected key and an exhausted quota are lasting
  (``lizard_core.failures.describe_failure``), a transient failure is not.
- File and workspace operations raise the SDK's ``WorkspaceArchiveReadError`` /
  ``WorkspaceArchiveWriteError`` with the ``lizard_core`` error as the cause.
- No message carries the API key: ``lizard_core``'s errors are redacted already, and a rejected
  key gets a fixed text.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from agents.sandbox.errors import (
    ExecTimeoutError,
    ExecTransportError,
    WorkspaceArchiveReadError,
    WorkspaceArchiveWriteError,
)

from lizard_core import errors as core
from lizard_core.failures import describe_failure
from lizard_core.truncation import head_and_tail

__all__ = ["PREVIEW_CHARS", "exec_errors", "failure_context", "workspace_errors"]

PREVIEW_CHARS = 4096
"""Characters of partial output kept (head and tail, ``lizard_core.truncation``) in an error's
context."""


def _preview(data: bytes) -> str:
    return head_and_tail(data.decode("utf-8", errors="replace"), PREVIEW_CHARS)


def failure_context(error: core.LizardIntegrationError) -> dict[str, object]:
    """What the SDK's error ``context`` says about a ``lizard_core`` failure."""
    failure = describe_failure(error, failed="The Lizard sandbox failed")
    return {"backend": "lizard", "detail": failure.message, "retryable": not failure.lasting}


@contextmanager
def exec_errors(command: Sequence[str], timeout: float | None) -> Iterator[None]:
    """Re-raise a command's ``lizard_core`` error as the module docstring says."""
    try:
        yield
    except core.CommandTimeoutError as error:
        shown: dict[str, object] = {
            "stdout": _preview(error.stdout),
            "stderr": _preview(error.stderr),
        }
        raise ExecTimeoutError(
            command=command, timeout_s=timeout, context=shown, cause=error
        ) from error
    except core.OutputLimitError as error:
        context = {
            **failure_context(error),
            "reason": "output_limit",
            "stdout": _preview(error.stdout),
            "stderr": _preview(error.stderr),
        }
        raise ExecTransportError(command=command, context=context, cause=error) from error
    except core.LizardIntegrationError as error:
        context = failure_context(error)
        raise ExecTransportError(command=command, context=context, cause=error) from error


@contextmanager
def workspace_errors(path: Path, *, write: bool) -> Iterator[None]:
    """Re-raise a file operation's ``lizard_core`` or ``OSError`` as the SDK's workspace error."""
    kind = WorkspaceArchiveWriteError if write else WorkspaceArchiveReadError
    try:
        yield
    except core.LizardIntegrationError as error:
        raise kind(path=path, context=failure_context(error), cause=error) from error
    except OSError as error:
        context = {"backend": "lizard", "detail": str(error)}
        raise kind(path=path, context=context, cause=error) from error
