"""Retry policy for idempotent Lizard calls.

Contract:

- Only a call the caller declared idempotent is ever retried, and only on
  :class:`~lizard_core.errors.TransientError`, or on a
  :class:`~lizard_core.errors.QuotaError` whose ``retry_after`` is short (a rate limit that
  will lift within :attr:`RetryPolicy.max_retry_after`). Creates are never idempotent.
- The wait before retry *n* is exponential backoff with full jitter, never less than the
  server's ``retry_after``. A ``retry_after`` longer than ``max_retry_after`` is not waited
  for: the error is raised at once, so the caller decides.
- The last error is raised unchanged after ``attempts`` tries.
- :func:`attempts` is the one retry loop, for blocking and async callers alike: each
  :class:`Attempt` swallows an error worth retrying and says how long to wait.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterator
from dataclasses import dataclass
from types import TracebackType

from lizard_core.errors import LizardIntegrationError, QuotaError, TransientError

__all__ = ["Attempt", "RetryPolicy", "attempts"]

_log = logging.getLogger("lizard_core.session")


@dataclass(frozen=True, kw_only=True)
class RetryPolicy:
    """How often and how long to retry an idempotent call on a transient failure."""

    attempts: int = 3
    """Total tries, the first included; 1 disables retries."""

    base_delay: float = 0.25
    """Backoff before the first retry, in seconds; doubled for each further retry."""

    max_delay: float = 4.0
    """Upper bound of one backoff, in seconds."""

    max_retry_after: float = 30.0
    """Longest server-requested wait (``retry_after``) that is honoured by waiting."""

    def __post_init__(self) -> None:
        if not isinstance(self.attempts, int) or isinstance(self.attempts, bool):
            raise TypeError("attempts must be an int")
        if self.attempts < 1:
            raise ValueError("attempts must be at least 1")
        for name in ("base_delay", "max_delay", "max_retry_after"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or isinstance(value, bool):
                raise TypeError(f"{name} must be a number")
            if not 0 <= value < float("inf"):
                raise ValueError(f"{name} must be finite and not negative")

    def delay(self, error: LizardIntegrationError, retry: int) -> float | None:
        """Seconds to wait before retry number ``retry`` (1-based), or None not to retry."""
        if retry >= self.attempts:
            return None
        if isinstance(error, TransientError):
            retry_after = error.retry_after
        elif isinstance(error, QuotaError) and error.retry_after is not None:
            retry_after = error.retry_after  # a rate limit that says when it lifts
        else:
            return None
        if retry_after is not None and retry_after > self.max_retry_after:
            return None
        backoff = random.uniform(0, min(self.max_delay, self.base_delay * 2 ** (retry - 1)))
        return max(backoff, retry_after or 0.0)


NO_RETRY = RetryPolicy(attempts=1)
"""A policy that never retries."""


class Attempt:
    """One try of a call: ``with attempt:`` around it swallows an error worth retrying.

    After a swallowed error, :attr:`delay` is the wait before the next attempt; any other
    error (or one past the policy's tries) propagates.
    """

    def __init__(self, policy: RetryPolicy, number: int, *, idempotent: bool, name: str) -> None:
        self._policy = policy
        self._number = number
        self._idempotent = idempotent
        self._name = name
        self.delay = 0.0

    def __enter__(self) -> Attempt:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        if not isinstance(exc, LizardIntegrationError) or not self._idempotent:
            return False
        delay = self._policy.delay(exc, self._number)
        if delay is None:
            return False
        _log.debug("retrying %s in %.2fs after %s", self._name, delay, type(exc).__name__)
        self.delay = delay
        return True


def attempts(policy: RetryPolicy, *, idempotent: bool, name: str) -> Iterator[Attempt]:
    """Endless attempts; the caller returns from one, or the last one's error propagates."""
    number = 1
    while True:
        yield Attempt(policy, number, idempotent=idempotent, name=name)
        number += 1
