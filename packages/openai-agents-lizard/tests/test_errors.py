"""Each ``lizard_core`` error kind maps to the tool error the module docstring promises."""

from __future__ import annotations

import pytest

from lizard_core import errors as core
from openai_agents_lizard import LizardToolError, SandboxUnavailableError
from openai_agents_lizard._errors import tool_errors


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (core.SandboxGoneError(), SandboxUnavailableError),
        (core.CredentialsError("rejected"), SandboxUnavailableError),
        (core.QuotaError("pay", url="https://lizard.build/billing"), SandboxUnavailableError),
        (core.QuotaError("slow down", retry_after=2.0), LizardToolError),
        (core.TransientError("503"), LizardToolError),
        (core.GuestProtocolError("cut short"), LizardToolError),
        (core.LizardIntegrationError("400"), LizardToolError),
    ],
)
def test_each_kind_maps_to_its_tool_error(
    error: core.LizardIntegrationError, expected: type[Exception]
) -> None:
    with pytest.raises(expected) as caught, tool_errors():
        raise error
    assert caught.value.__cause__ is error


def test_partial_output_is_kept_and_decoded() -> None:
    with pytest.raises(LizardToolError) as caught, tool_errors():
        raise core.CommandTimeoutError(stdout=b"partial \xff", stderr=b"err")
    assert (caught.value.stdout, caught.value.stderr) == ("partial \ufffd", "err")


def test_a_rejected_key_gets_a_fixed_message() -> None:
    with pytest.raises(SandboxUnavailableError) as caught, tool_errors():
        raise core.CredentialsError("provider text")
    assert "provider text" not in str(caught.value)


def test_other_exceptions_pass_unchanged() -> None:
    with pytest.raises(KeyError), tool_errors():
        raise KeyError("not ours")
