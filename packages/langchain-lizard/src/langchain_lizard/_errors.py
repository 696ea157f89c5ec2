"""The one place that maps ``lizard_core`` errors onto what Deep Agents expects.

- :func:`file_error` turns a file operation's ``OSError`` into Deep Agents' per-file code
  (``file_not_found``, ``is_directory``, ``permission_denied``, ``invalid_path``), or its text.
- A gone sandbox, a rejected key or an exhausted quota: :class:`SandboxUnavailableError`, raised.
  Anything else from ``lizard_core`` (transient failures, a rate limit that says when to retry):
  :class:`LizardSandboxError`, split and worded by ``lizard_core.failures.describe_failure``.
  The ``lizard_core`` error is the ``__cause__``; no message holds the API key (a rejected key
  gets a fixed one).
"""

from __future__ import annotations

import errno
from collections.abc import Iterator
from contextlib import contextmanager

from lizard_core import errors as core
from lizard_core.failures import describe_failure

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
    except core.LizardIntegrationError as error:
        failure = describe_failure(error, failed="The Lizard sandbox operation failed")
        if failure.lasting:
            raise SandboxUnavailableError(failure.message) from error
        raise LizardSandboxError(failure.message) from error
