"""The one place that maps `lizard_core` errors onto what Pydantic AI's workspace protocol promises.

Contract (from `pydantic_ai/workspaces/protocol.py`):

- a sandbox that is gone (destroyed, expired, never existed), and credentials or billing that no
  retry can fix, are `WorkspaceUnavailableError`; the provider's text for a rejected key is never
  passed on. A 403 with a platform code is a policy refusal (the key was accepted) and says so,
  naming the code; a 401, or a 403 without a code, points at the key. A sandbox destroyed
  under a running command or file operation is included: lizard_core checks the sandbox when a
  stream breaks and raises `SandboxGoneError` then;
- a command past its `timeout` is `WorkspaceTimeoutError` and one past its output cap is
  `WorkspaceOutputLimitError`, both carrying the partial output decoded like a result;
- a guest program that died or stalled in a live sandbox is a `WorkspaceError`;
- path-level failures are already builtin `OSError`s in `lizard_core.files` and pass unchanged;
- everything else, transient failures above all (5xx, dropped connections, rate limits), propagates
  unchanged so that durable engines can retry it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from pydantic_ai.workspaces import (
    WorkspaceError,
    WorkspaceOutputLimitError,
    WorkspaceTimeoutError,
    WorkspaceUnavailableError,
)

from lizard_core import errors as core
from lizard_core.session import Session

__all__ = ["decode_output", "translate", "workspace_errors"]


def decode_output(data: bytes) -> str:
    """Decode captured output for the model: invalid UTF-8 becomes U+FFFD, never dropped."""
    return data.decode("utf-8", errors="replace")


def _gone_message(sandbox_id: str | None) -> str:
    which = f"The Lizard sandbox {sandbox_id!r}" if sandbox_id else "The Lizard sandbox"
    return (
        f"{which} no longer exists: it was destroyed or its lifetime ran out. "
        "Its files are gone; start a new workspace (for a run, pass workspace='new')."
    )


def _refusal(error: core.CredentialsError) -> str:
    """What a 401/403 means, from its status and code only: provider text can echo a key."""
    if error.status_code == 403 and error.code:
        # A policy refusal (a size the plan does not allow, ...): the key itself was accepted.
        return (
            f"Lizard refused the request (HTTP 403, code {error.code}): the account or its plan "
            "does not allow it. Change what was asked (size, region, template, ...) or the "
            "account's plan; the API key was accepted."
        )
    if error.status_code == 403:
        return (
            "Lizard refused this action for the API key (HTTP 403). Check that LIZARD_API_KEY "
            "(or api_key=) may use the project in LIZARD_PROJECT_ID (or project_id=)."
        )
    return (
        "Lizard rejected the credentials (HTTP 401). Set a valid LIZARD_API_KEY (and "
        "LIZARD_PROJECT_ID) on the host, or pass api_key= and project_id=."
    )


def translate(
    error: core.LizardIntegrationError, *, sandbox_id: str | None, output_limit: int
) -> BaseException:
    """The exception the workspace protocol wants for `error`; `error` itself to propagate it."""
    if isinstance(error, core.SandboxGoneError):
        return WorkspaceUnavailableError(_gone_message(sandbox_id))
    if isinstance(error, core.CredentialsError):
        return WorkspaceUnavailableError(_refusal(error))
    if isinstance(error, core.QuotaError):
        if error.retry_after is not None:
            return error  # a rate limit: a later retry can succeed
        where = f" Open {error.url} to resolve it." if error.url else ""
        return WorkspaceUnavailableError(f"Lizard refused the request: {error}.{where}")
    if isinstance(error, core.CommandTimeoutError):
        return WorkspaceTimeoutError(
            str(error), stdout=decode_output(error.stdout), stderr=decode_output(error.stderr)
        )
    if isinstance(error, core.OutputLimitError):
        return WorkspaceOutputLimitError(
            f"{error} Redirect the output to a file and read part of it instead.",
            limit=error.limit or output_limit,
            stdout=decode_output(error.stdout),
            stderr=decode_output(error.stderr),
        )
    if isinstance(error, core.GuestProtocolError):
        # lizard_core found the sandbox still there, but its helper broke off (killed, out of
        # memory): the environment may still be usable, so this is a deliberate failure, not
        # "unavailable".
        return WorkspaceError(f"The operation's helper in the Lizard sandbox failed: {error}")
    return error


@asynccontextmanager
async def workspace_errors(session: Session, *, output_limit: int = 0) -> AsyncIterator[None]:
    """Re-raise a `lizard_core` error from the block as the workspace protocol wants it."""
    try:
        yield
    except core.LizardIntegrationError as error:
        mapped = translate(error, sandbox_id=session.sandbox_id, output_limit=output_limit)
        if mapped is error:
            raise
        raise mapped from error
