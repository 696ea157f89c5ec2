"""Keep Lizard API keys out of text that leaves the process.

Contract:

- :class:`Secret` holds a credential; its ``repr`` and ``str`` never show the value, and only
  :meth:`Secret.reveal` returns it (for the one place that hands it to the SDK).
- Every key a :class:`~lizard_core.config.SandboxConfig` is built with is registered here, so
  :func:`redact` can scrub it from any text (error messages, response bodies) without being told
  which key to look for. The current ``LIZARD_API_KEY`` and anything shaped like a Lizard key
  (``liz_...``) are scrubbed too.
- Registration keeps the values in memory for the life of the process; nothing is written out.
"""

from __future__ import annotations

import hmac
import os
import re
import threading
from typing import Final

__all__ = ["REDACTED", "Secret", "redact", "register_secret"]

REDACTED: Final = "***"

# Lizard keys start with "liz_" (the SDK's docs for lizard_token); scrub anything of that shape
# even when it is not a key this process knows, e.g. a server echoing another credential.
_KEY_SHAPE = re.compile(r"liz_[A-Za-z0-9_\-]{6,}")
# Shorter values would collide with ordinary words in a message, so they are not scrubbed by
# substring. Real Lizard keys are far longer; only toy keys of a test server are this short.
_MIN_SECRET_LENGTH = 4

_lock = threading.Lock()
_known: set[str] = set()


class Secret:
    """A credential whose value is never shown by ``repr``, ``str`` or formatting.

    Compare two secrets with ``==`` (constant time). Use :meth:`reveal` only where the value must
    be handed to the SDK.
    """

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        if not isinstance(value, str):
            raise TypeError("a secret must be a str")
        self._value = value

    def reveal(self) -> str:
        """Return the secret value. Never log, print or put the result into a sandbox."""
        return self._value

    def __repr__(self) -> str:
        return f"Secret({REDACTED!r})"

    def __str__(self) -> str:
        return REDACTED

    def __format__(self, format_spec: str) -> str:
        return format(REDACTED, format_spec)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Secret):
            return NotImplemented
        return hmac.compare_digest(self._value.encode(), other._value.encode())

    def __hash__(self) -> int:
        return hash((Secret, self._value))

    def __reduce__(self) -> tuple[type[Secret], tuple[str]]:
        return (Secret, (self._value,))


def register_secret(value: str) -> None:
    """Remember ``value`` so that :func:`redact` scrubs it from any text from now on."""
    if len(value) >= _MIN_SECRET_LENGTH:
        with _lock:
            _known.add(value)


def _secrets(extra: tuple[str, ...]) -> list[str]:
    with _lock:
        values = _known.union(extra)
    values.add(os.environ.get("LIZARD_API_KEY", ""))
    # Longest first, so a key that contains another is replaced whole.
    return sorted((v for v in values if len(v) >= _MIN_SECRET_LENGTH), key=len, reverse=True)


def redact(text: str, *extra: str) -> str:
    """Return ``text`` with every known API key, each of ``extra`` and any ``liz_`` key removed.

    Values shorter than four characters are not scrubbed by substring (they would mangle
    ordinary words); real keys are much longer.
    """
    for value in _secrets(extra):
        if value in text:
            text = text.replace(value, REDACTED)
    return _KEY_SHAPE.sub(REDACTED, text)
