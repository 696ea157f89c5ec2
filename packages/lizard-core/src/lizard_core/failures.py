"""What an adapter tells its user about a ``lizard_core`` error, and whether retrying can help.

Contract:

- :func:`describe_failure` is lasting (``Failure.lasting``) for an error that trying again
  cannot fix: a rejected API key, a sandbox that is gone (destroyed, expired) and an exhausted
  quota. The adapter raises its "build a new one" error for these.
- A rate limit that says when to retry is not lasting, and neither is anything else
  (transient API failures above all): the adapter raises its "this call failed" error.
- No message holds the API key: a rejected key gets a fixed text, every other message is the
  error's own text, which ``lizard_core`` has redacted already.
- :func:`output_excerpt` is what a message shows of a command's output (a model may read only the
  message): all of it when short, else its head and tail around a marker saying how much was
  left out, never nothing and never a silent cut.

Adapters whose framework words these failures its own way keep their own mapping; this is the
wording of those that do not (and of every adapter made from the template).
"""

from __future__ import annotations

from typing import Final, NamedTuple

from lizard_core.errors import (
    CredentialsError,
    LizardIntegrationError,
    QuotaError,
    SandboxGoneError,
)

__all__ = ["EXCERPT_CHARS", "Failure", "describe_failure", "output_excerpt"]

EXCERPT_CHARS: Final = 2000
"""Characters of each end of a long output that :func:`output_excerpt` keeps."""


class Failure(NamedTuple):
    """A ``lizard_core`` error in words for the user, and whether it outlasts a retry."""

    message: str
    """The text for the adapter's exception."""
    lasting: bool
    """True when trying again cannot help: the sandbox or the account must change first."""


def describe_failure(error: LizardIntegrationError, *, failed: str) -> Failure:
    """Describe ``error``; ``failed`` opens the message of an error of no named kind.

    For example ``failed="The command failed in the Lizard sandbox"`` gives
    ``"The command failed in the Lizard sandbox: <error>"`` for a transient failure.
    """
    if isinstance(error, CredentialsError):
        return Failure(
            "Lizard rejected the credentials: set a valid LIZARD_API_KEY and LIZARD_PROJECT_ID, "
            "or pass api_key= and project_id=.",
            lasting=True,
        )
    if isinstance(error, SandboxGoneError):
        return Failure(
            f"The Lizard sandbox no longer exists (destroyed, or its lifetime ran out): {error}",
            lasting=True,
        )
    if isinstance(error, QuotaError):
        if error.retry_after is not None:
            return Failure(
                f"Lizard is rate limiting requests; retry in {error.retry_after:g} s: {error}",
                lasting=False,
            )
        where = f" Open {error.url} to resolve it." if error.url else ""
        return Failure(f"Lizard refused the request: {error}.{where}", lasting=True)
    return Failure(f"{failed}: {error}", lasting=False)


def output_excerpt(text: str, chars: int = EXCERPT_CHARS) -> str:
    """``text`` whole, or its first and last ``chars`` characters around a marker."""
    if len(text) <= 2 * chars:
        return text
    left_out = len(text) - 2 * chars
    return f"{text[:chars]}\n[... {left_out} characters left out ...]\n{text[-chars:]}"
