import pytest

from lizard_core.errors import (
    CredentialsError,
    LizardIntegrationError,
    QuotaError,
    SandboxGoneError,
    TransientError,
)
from lizard_core.failures import Failure, describe_failure, output_excerpt

FAILED = "The operation failed"


def test_a_rejected_key_is_lasting_and_its_text_is_fixed():
    failure = describe_failure(CredentialsError("sk-secret-in-provider-text"), failed=FAILED)
    assert failure.lasting
    assert "sk-secret" not in failure.message
    assert failure.message.startswith("Lizard rejected the credentials: set a valid LIZARD_API_KEY")


def test_a_gone_sandbox_is_lasting():
    failure = describe_failure(SandboxGoneError("sandbox sb-1 is gone"), failed=FAILED)
    assert failure == Failure(
        "The Lizard sandbox no longer exists (destroyed, or its lifetime ran out): "
        "sandbox sb-1 is gone",
        lasting=True,
    )


def test_a_rate_limit_with_a_retry_time_may_pass():
    failure = describe_failure(QuotaError("429 too many", retry_after=2.5), failed=FAILED)
    assert failure == Failure(
        "Lizard is rate limiting requests; retry in 2.5 s: 429 too many", lasting=False
    )


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (None, "Lizard refused the request: payment required."),
        (
            "https://example.test/billing",
            "Lizard refused the request: payment required. "
            "Open https://example.test/billing to resolve it.",
        ),
    ],
)
def test_an_exhausted_quota_is_lasting_and_names_where_to_resolve_it(url, expected):
    failure = describe_failure(QuotaError("payment required", url=url), failed=FAILED)
    assert failure == Failure(expected, lasting=True)


@pytest.mark.parametrize("error", [TransientError("503 unavailable"), LizardIntegrationError("x")])
def test_anything_else_may_pass_and_opens_with_what_failed(error):
    failure = describe_failure(error, failed=FAILED)
    assert failure == Failure(f"{FAILED}: {error}", lasting=False)


def test_an_output_excerpt_keeps_short_text_whole_and_long_text_s_ends() -> None:
    assert output_excerpt("short") == "short"
    assert output_excerpt("ab" * 10, chars=10) == "ab" * 10
    text = "HEAD" + "x" * 1000 + "TAIL"
    cut = output_excerpt(text, chars=10)
    assert cut == "HEADxxxxxx\n[... 988 characters left out ...]\nxxxxxxTAIL"
