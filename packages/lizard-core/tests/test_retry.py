from __future__ import annotations

import pytest

from lizard_core._retry import NO_RETRY, RetryPolicy
from lizard_core.errors import (
    CredentialsError,
    LizardIntegrationError,
    QuotaError,
    SandboxGoneError,
    TransientError,
)


@pytest.mark.parametrize(
    "error",
    [
        LizardIntegrationError("400"),
        SandboxGoneError(),
        CredentialsError("401"),
        QuotaError("402", url="https://pay"),
        QuotaError("429 no retry_after"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_only_transient_or_timed_quota_errors_are_retried(error: LizardIntegrationError) -> None:
    assert RetryPolicy().delay(error, 1) is None


def test_transient_errors_back_off_within_bounds() -> None:
    policy = RetryPolicy(attempts=10, base_delay=0.5, max_delay=2.0)
    for retry in range(1, 10):
        delay = policy.delay(TransientError("503"), retry)
        assert delay is not None
        assert 0 <= delay <= min(2.0, 0.5 * 2 ** (retry - 1))


def test_attempts_bound_the_retries() -> None:
    policy = RetryPolicy(attempts=3)
    assert policy.delay(TransientError("503"), 1) is not None
    assert policy.delay(TransientError("503"), 2) is not None
    assert policy.delay(TransientError("503"), 3) is None
    assert NO_RETRY.delay(TransientError("503"), 1) is None


def test_retry_after_is_honoured_as_a_minimum() -> None:
    policy = RetryPolicy(base_delay=0.01, max_delay=0.01)
    assert policy.delay(QuotaError("429", retry_after=2.0), 1) == 2.0
    assert policy.delay(TransientError("503", retry_after=1.5), 1) == 1.5


def test_a_long_retry_after_is_not_waited_for() -> None:
    policy = RetryPolicy(max_retry_after=10.0)
    assert policy.delay(QuotaError("429", retry_after=60.0), 1) is None
    assert policy.delay(TransientError("503", retry_after=11.0), 1) is None


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"attempts": 0}, ValueError),
        ({"attempts": True}, TypeError),
        ({"attempts": 2.0}, TypeError),
        ({"base_delay": -1}, ValueError),
        ({"max_delay": float("inf")}, ValueError),
        ({"max_retry_after": float("nan")}, ValueError),
        ({"base_delay": "1"}, TypeError),
    ],
)
def test_policy_validation(kwargs: dict[str, object], error: type[Exception]) -> None:
    with pytest.raises(error):
        RetryPolicy(**kwargs)  # type: ignore[arg-type]
