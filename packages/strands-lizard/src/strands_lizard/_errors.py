r"""The one place that maps ``lizard_core`` errors onto what Strands expects.

- A command or cell stopped at its timeout: Strands' ``SandboxTimeoutError`` (a ``TimeoutError``)
  with the partial output in ``stdout`` and ``stderr``, which Strands' tools hand to the model.
- A command stopped at the output limit: :class:`LizardSandboxError` with the kept output in
  ``stdout`` / ``stderr`` and its head and tail in the message; never a short success.
- A sandbox that is gone, a rejected API key or an exhausted quota: :class:`SandboxUnavailableError`
  (build a new sandbox). Anything else from ``lizard_core`` (transient failures, a rate limit that
  says when to retry): :class:`LizardSandboxError`. The wording and the split are
  ``lizard_core.failures.describe_failure``'s; the ``lizard_core`` error is the ``__cause__``.
- ``OSError``\\ s of file operations pass through, as the seam documents them.
- Messages never contain the API key: ``lizard_core``'s errors are redacted already, and a rejected
  key gets a fixed message.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

from strands.sandbox.errors import SandboxTimeoutError

from lizard_core import errors as core
from lizard_core.failures import describe_failure
from lizard_core.truncation import head_and_tail

__all__ = ["LizardSandboxError", "SandboxUnavailableError", "decode", "sandbox_errors"]

_TIMEOUT_CARRIES_OUTPUT: Final = "stdout" in inspect.signature(SandboxTimeoutError).parameters
"""Strands 1.58+: its tools show the model a timeout's partial output themselves."""


class LizardSandboxError(RuntimeError):
    """An operation could not reach the sandbox or finish there; trying again may work.

    ``stdout`` and ``stderr`` hold what a command wrote before the output limit stopped it
    (empty otherwise).
    """

    def __init__(self, message: str, *, stdout: str = "", stderr: str = "") -> None:
        super().__init__(message)
        self.stdout = stdout
        self.stderr = stderr


class SandboxUnavailableError(LizardSandboxError):
    """The sandbox is gone, or Lizard refuses the credentials or the quota: build a new one."""


def decode(data: bytes) -> str:
    """Output as text for Strands: invalid UTF-8 becomes U+FFFD, never dropped."""
    return data.decode("utf-8", errors="replace")


def timeout_error(seconds: float | None, stdout: str, stderr: str) -> SandboxTimeoutError:
    """Strands' timeout error with the partial output.

    Before 1.58 Strands' error took only the seconds and its tools showed the model only the
    message: there the message carries the output's head and tail too.
    """
    error = SandboxTimeoutError(seconds)
    if not _TIMEOUT_CARRIES_OUTPUT:
        error.args = (f"{error}\n{_shown(stdout, stderr)}".rstrip(),)
    error.stdout, error.stderr = stdout, stderr
    return error


_SHOWN_CHARS = 4000  # of each stream in a message: the head and tail, with a marker


def _shown(stdout: str, stderr: str) -> str:
    parts = (("stdout", stdout), ("stderr", stderr))
    shown = [f"{name}:\n{head_and_tail(text, _SHOWN_CHARS)}" for name, text in parts if text]
    return "\n".join(shown)


@contextmanager
def sandbox_errors() -> Iterator[None]:
    """Re-raise any ``lizard_core`` error inside the block as the module docstring says."""
    try:
        yield
    except core.CommandTimeoutError as error:
        raise timeout_error(error.timeout, decode(error.stdout), decode(error.stderr)) from error
    except core.OutputLimitError as error:
        stdout, stderr = decode(error.stdout), decode(error.stderr)
        message = f"{error}\n{_shown(stdout, stderr)}".rstrip()
        raise LizardSandboxError(message, stdout=stdout, stderr=stderr) from error
    except core.LizardIntegrationError as error:
        failure = describe_failure(error, failed="The Lizard sandbox operation failed")
        if failure.lasting:
            raise SandboxUnavailableError(failure.message) from error
        raise LizardSandboxError(failure.message) from error
