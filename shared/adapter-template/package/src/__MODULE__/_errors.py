"""The one place that maps ``lizard_core`` errors onto what __TITLE__ expects.

Contract:

- A sandbox that is gone (destroyed, expired), a rejected API key and an exhausted quota cannot
  be fixed by trying again: :class:`SandboxUnavailableError`. A rate limit that says when to
  retry is not exhausted: it is a :class:`LizardToolError` like other failures that may pass.
  That split and its wording are ``lizard_core.failures.describe_failure``'s.
- A command that timed out or passed the output limit is a :class:`LizardToolError` carrying the
  partial output, decoded like a result; so is every other ``lizard_core`` error (transient API
  failures above all), with the ``lizard_core`` error as its ``__cause__``.
- Messages never contain the API key: ``lizard_core``'s errors are redacted already, and a
  rejected key gets a fixed message.

Replace the two classes with __TITLE__'s own error types where it has them
(the error it expects from a tool, the one that ends a run), and keep this module the only
place that maps them.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from lizard_core import errors as core
from lizard_core.failures import describe_failure

__all__ = ["LizardToolError", "SandboxUnavailableError", "decode_output", "tool_errors"]


class LizardToolError(Exception):
    """A command could not be run to completion; trying again may work.

    ``stdout`` and ``stderr`` hold the output produced before a timeout or the output limit
    stopped the command (empty otherwise).
    """

    def __init__(self, message: str, *, stdout: str = "", stderr: str = "") -> None:
        super().__init__(message)
        self.stdout = stdout
        self.stderr = stderr


class SandboxUnavailableError(Exception):
    """The sandbox cannot be used any more.

    It is gone, or Lizard refuses the credentials or the quota. Build a new tool (with valid
    credentials) to go on.
    """


def decode_output(data: bytes) -> str:
    """Decode a command's output for the model: invalid UTF-8 becomes U+FFFD, never dropped."""
    return data.decode("utf-8", errors="replace")


@contextmanager
def tool_errors() -> Iterator[None]:
    """Re-raise any ``lizard_core`` error inside the block as the module docstring says."""
    try:
        yield
    except (core.CommandTimeoutError, core.OutputLimitError) as error:
        raise LizardToolError(
            str(error), stdout=decode_output(error.stdout), stderr=decode_output(error.stderr)
        ) from error
    except core.LizardIntegrationError as error:
        failure = describe_failure(error, failed="The command failed in the Lizard sandbox")
        if failure.lasting:
            raise SandboxUnavailableError(failure.message) from error
        raise LizardToolError(failure.message) from error
