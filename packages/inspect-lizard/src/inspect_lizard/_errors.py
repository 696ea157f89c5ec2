"""The one place that maps ``lizard_core`` errors onto what Inspect's sandbox contract names.

Contract (``inspect_ai/util/_sandbox/environment.py``):

- A sandbox that is gone (destroyed, expired) is Inspect's ``SandboxUnavailableError``: a tool
  call reports it to the model as ``sandbox_unavailable`` and the sample goes on.
- A command past its timeout is a ``TimeoutError`` (Inspect's ``SandboxTimeoutError``) with
  the output produced before it as ``truncated_output``; past the output limit it is
  ``OutputLimitExceededError`` with the partial output.
- A rejected key, an exhausted quota, a transient API failure or a broken guest protocol is a
  :class:`LizardSandboxError`, with the ``lizard_core`` error as its ``__cause__``: it fails the
  sample (Inspect's ``retry_on_error`` may run it again). A rejected key gets a fixed message.
- Builtin ``OSError``s (``FileNotFoundError``, ``PermissionError``, ``IsADirectoryError``, ...)
  pass through unchanged, as the contract wants them.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from inspect_ai.util import (
    OutputLimitExceededError,
    SandboxEnvironmentLimits,
    SandboxUnavailableError,
)

from lizard_core import errors as core

try:  # Inspect's own class, so that its tools read truncated_output; private, hence guarded
    from inspect_ai.util._sandbox.events import SandboxTimeoutError
except ImportError:  # pragma: no cover - a future Inspect that moved it

    class SandboxTimeoutError(TimeoutError):  # type: ignore[no-redef]
        """A command past its timeout, with the output it wrote before (Inspect's shape)."""

        def __init__(self, message: str, truncated_output: str | None = None) -> None:
            super().__init__(message)
            self.truncated_output = truncated_output


__all__ = ["LizardSandboxError", "decode_output", "inspect_errors"]


class LizardSandboxError(RuntimeError):
    """The Lizard API failed the operation: credentials, quota, a transient or protocol fault."""


def decode_output(data: bytes) -> str:
    """Decode a command's output: invalid UTF-8 becomes U+FFFD, never dropped."""
    return data.decode("utf-8", errors="replace")


@contextmanager
def inspect_errors() -> Iterator[None]:
    """Re-raise any ``lizard_core`` error inside the block as the module docstring says."""
    try:
        yield
    except core.SandboxGoneError as error:
        raise SandboxUnavailableError(
            f"The Lizard sandbox no longer exists (destroyed, or its lifetime ran out): {error}"
        ) from error
    except core.CommandTimeoutError as error:
        partial = decode_output(error.stdout) + decode_output(error.stderr)
        raise SandboxTimeoutError(str(error), partial or None) from error
    except core.OutputLimitError as error:
        partial = decode_output(error.stdout) + decode_output(error.stderr)
        # Only exec has an output limit; the read limit is checked by the environment itself.
        limit = SandboxEnvironmentLimits.MAX_EXEC_OUTPUT_SIZE_STR
        raise OutputLimitExceededError(limit, partial) from error
    except core.SetupFailedError as error:
        raise LizardSandboxError(
            f"The task's setup exited with code {error.exit_code}:\n{error.output}"
        ) from error
    except core.CredentialsError as error:
        raise LizardSandboxError(
            "Lizard rejected the credentials: set a valid LIZARD_API_KEY and LIZARD_PROJECT_ID."
        ) from error
    except core.LizardIntegrationError as error:
        raise LizardSandboxError(f"Lizard failed the sandbox operation: {error}") from error
