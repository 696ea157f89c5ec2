"""Each ``lizard_core`` error kind maps to the error the module docstring promises."""

from __future__ import annotations

import pytest
from strands.sandbox.errors import SandboxTimeoutError

from lizard_core import errors as core
from strands_lizard import LizardSandboxError, SandboxUnavailableError
from strands_lizard._errors import sandbox_errors


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (core.SandboxGoneError(), SandboxUnavailableError),
        (core.CredentialsError("rejected"), SandboxUnavailableError),
        (core.QuotaError("pay", url="https://lizard.build/billing"), SandboxUnavailableError),
        (core.QuotaError("slow down", retry_after=2.0), LizardSandboxError),
        (core.TransientError("503"), LizardSandboxError),
        (core.GuestProtocolError("cut short"), LizardSandboxError),
        (core.LizardIntegrationError("400"), LizardSandboxError),
    ],
)
def test_each_kind_maps_to_its_error(
    error: core.LizardIntegrationError, expected: type[Exception]
) -> None:
    with pytest.raises(expected) as caught, sandbox_errors():
        raise error
    assert caught.value.__cause__ is error


def test_a_timeout_is_strands_error_with_the_decoded_partial_output() -> None:
    with pytest.raises(SandboxTimeoutError) as caught, sandbox_errors():
        raise core.CommandTimeoutError(stdout=b"partial \xff", stderr=b"err", timeout=2.0)
    assert (caught.value.stdout, caught.value.stderr) == ("partial \ufffd", "err")
    assert "2.0 seconds" in str(caught.value)


def test_the_output_limit_shows_head_and_tail_and_keeps_the_output() -> None:
    text = "head" + "x" * 10_000 + "tail"
    with pytest.raises(LizardSandboxError) as caught, sandbox_errors():
        raise core.OutputLimitError("too much", stdout=text.encode(), stderr=b"", limit=10)
    assert caught.value.stdout == text
    message = str(caught.value)
    assert message.count("x") < 5000
    assert "head" in message
    assert "tail" in message
    assert "cut from the middle" in message
    assert len(message) < 5000


def test_a_rejected_key_gets_a_fixed_message() -> None:
    with pytest.raises(SandboxUnavailableError) as caught, sandbox_errors():
        raise core.CredentialsError("provider text")
    assert "provider text" not in str(caught.value)


def test_other_exceptions_pass_unchanged() -> None:
    with pytest.raises(FileNotFoundError), sandbox_errors():
        raise FileNotFoundError("ours to pass")
