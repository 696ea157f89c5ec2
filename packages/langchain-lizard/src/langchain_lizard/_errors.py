"""The one place that maps ``lizard_core`` errors onto what Deep Agents expects.

- :func:`file_error` turns a file operation's ``OSError`` into Deep Agents' per-file code
  (``file_not_found``, ``is_directory``, ``permission_denied``, ``invalid_path``), or its text.
- A gone sandbox, a rejected key or an exhausted quota: :class:`SandboxUnavailableError`, raised.
  Anything else from ``lizard_core`` (transient failures, a rate limit that says when to retry):
  :class:`LizardSandboxError`. The ``lizard_core`` error is the ``__cause__``; no message holds
  the API key (a rejected key gets a fixed one).
"""

from __future__ import annotations

import errno
from collections.abc import Iterator
from contextlib import contextmanager

from lizard_core import errors as core

__all__ = ["LizardSandboxError", "SandboxUnavailableError", "file_error", "sandbox_errors"]


class LizardSandboxError(RuntimeError):
    """An operation could not reach the sandbox or finish there; trying again may work."""


class SandboxUnavailableError(LizardSandboxError):
    """The sandbox is gone, or Lizard refuses the credentials or the quota: build a new backend."""


_CODES = {
    errno.ENOENT: "file_not_found",
    errno.ENOTDIR: "file_not_found",  # a component of the path is a file: nothing is there
    errno.EISDIR: "is_directory",
    errno.EACCES: "permission_denied",
    errno.EPERM: "permission_denied",
    errno.EROFS: "permission_denied",
    errno.EINVAL: "invalid_path",  # a FIFO, socket or device: not a file to transfer
    errno.ENAMETOOLONG: "invalid_path",
}


def file_error(error: OSError) -> str:
    """The ``FileOperationError`` code for ``error``, or its text when no code fits."""
    code = _CODES.get(error.errno or 0)
    if code is not None:
        return code
    return error.strerror or str(error) or type(error).__name__


@contextmanager
def sandbox_errors() -> Iterator[None]:
    """Re-raise any ``lizard_core`` error inside the block as the module docstring says."""
    try:
        yield
    except core.CredentialsError as error:
        raise SandboxUnavailableError(
            "Lizard rejected the credentials: set a valid LIZARD_API_KEY and LIZARD_PROJECT_ID, "
            "or pass api_key= and project_id=."
        ) from error
    except core.SandboxGoneError as error:
        raise SandboxUnavailableError(
            f"The Lizard sandbox no longer exists (destroyed, or its lifetime ran out): {error}"
        ) from error
    except core.QuotaError as error:
        if error.retry_after is not None:
            raise LizardSandboxError(
                f"Lizard is rate limiting requests; retry in {error.retry_after:g} s: {error}"
            ) from error
        where = f" Open {error.url} to resolve it." if error.url else ""
        raise SandboxUnavailableError(f"Lizard refused the request: {error}.{where}") from error
    except core.LizardIntegrationError as error:
        raise LizardSandboxError(f"The Lizard sandbox operation failed: {error}") from error
