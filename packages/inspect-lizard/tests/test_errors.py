"""Each ``lizard_core`` error kind maps to the Inspect error the module docstring promises."""

from __future__ import annotations

import pytest
from inspect_ai.util import OutputLimitExceededError, SandboxUnavailableError
from inspect_ai.util._sandbox.limits import override_max_exec_output_size

from inspect_lizard import LizardSandboxError
from inspect_lizard._errors import inspect_errors
from lizard_core import errors as core


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (core.SandboxGoneError(), SandboxUnavailableError),
        (core.CredentialsError("rejected"), LizardSandboxError),
        (core.QuotaError("pay", url="https://lizard.build/billing"), LizardSandboxError),
        (core.QuotaError("slow down", retry_after=2.0), LizardSandboxError),
        (core.TransientError("503"), LizardSandboxError),
        (core.GuestProtocolError("cut short"), LizardSandboxError),
        (core.LizardIntegrationError("400"), LizardSandboxError),
    ],
)
def test_each_kind_maps_to_its_inspect_error(
    error: core.LizardIntegrationError, expected: type[Exception]
) -> None:
    with pytest.raises(expected) as caught, inspect_errors():
        raise error
    assert caught.value.__cause__ is error


def test_a_timeout_is_a_timeout_error_with_the_partial_output_decoded() -> None:
    with pytest.raises(TimeoutError) as caught, inspect_errors():
        raise core.CommandTimeoutError(stdout=b"partial \xff", stderr=b"err")
    assert getattr(caught.value, "truncated_output", None) == "partial \ufffderr"


def test_the_output_limit_names_inspects_limit() -> None:
    with (
        override_max_exec_output_size(2048),
        pytest.raises(OutputLimitExceededError) as caught,
        inspect_errors(),
    ):
        raise core.OutputLimitError(stdout=b"kept", stderr=b"")
    assert (caught.value.limit_str, caught.value.truncated_output) == ("2 KiB", "kept")


def test_a_rejected_key_gets_a_fixed_message() -> None:
    with pytest.raises(LizardSandboxError) as caught, inspect_errors():
        raise core.CredentialsError("provider text")
    assert "provider text" not in str(caught.value)


def test_builtin_os_errors_pass_unchanged() -> None:
    with pytest.raises(FileNotFoundError), inspect_errors():
        raise FileNotFoundError(2, "No such file or directory", "/x")
