"""lizard_core failures map to what smolagents expects: step errors, or the end of the run."""

from __future__ import annotations

import pytest
from smolagents.utils import AgentError

from lizard_core import errors as core
from lizard_core.guest import GuestNotStartedError
from lizard_core.kernel import KernelUnavailableError
from smolagents_lizard._errors import (
    PackageInstallError,
    SandboxUnavailableError,
    StepError,
    mapped_errors,
)


@pytest.mark.parametrize(
    "error",
    [
        core.SandboxGoneError(sandbox_id="sbx_1"),
        core.CredentialsError("Lizard rejected the API key (HTTP 401)."),
        core.QuotaError("Payment required", url="https://lizard.build/billing"),
        core.QuotaError("Limit reached", retry_after=3600.0),
        KernelUnavailableError("no python3"),
    ],
)
def test_unfixable_failures_end_the_run(error: core.LizardIntegrationError) -> None:
    with (
        pytest.raises(SandboxUnavailableError, match="while running the step") as raised,
        mapped_errors("running the step"),
    ):
        raise error
    assert raised.value.__cause__ is error
    # Not an Exception: smolagents would otherwise make it one more step for the model to retry.
    assert not isinstance(raised.value, Exception)


@pytest.mark.parametrize(
    "error",
    [core.TransientError("HTTP 503"), core.GuestProtocolError("the stream ended early")],
)
def test_lost_answers_are_step_errors_saying_the_effect_is_unknown(
    error: core.LizardIntegrationError,
) -> None:
    with (
        pytest.raises(StepError, match="Whether the code ran is unknown") as raised,
        mapped_errors("running the step"),
    ):
        raise error
    assert isinstance(raised.value, AgentError)
    assert raised.value.__cause__ is error


def test_a_request_the_sandbox_could_not_start_is_a_step_error_saying_nothing_ran() -> None:
    error = GuestNotStartedError("The guest program did not start (Argument list too long)")
    with (
        pytest.raises(StepError, match="so nothing of it ran") as raised,
        mapped_errors("defining the variables"),
    ):
        raise error
    assert "unknown" not in raised.value.message
    assert raised.value.__cause__ is error


def test_other_api_failures_are_step_errors_naming_the_kind() -> None:
    with (
        pytest.raises(StepError, match="LizardIntegrationError: Lizard API error 409"),
        mapped_errors("running the step"),
    ):
        raise core.LizardIntegrationError("Lizard API error 409: busy", status_code=409)


def test_other_exceptions_pass_through() -> None:
    with pytest.raises(KeyError), mapped_errors("running the step"):
        raise KeyError("not ours")


def test_package_install_error_carries_pips_output() -> None:
    error = PackageInstallError(["emoji"], "ERROR: No matching distribution found for emoji\n")
    assert error.packages == ["emoji"]
    assert "Installing emoji in the sandbox failed; pip said:\nERROR: No matching" in str(error)


def test_a_short_rate_limit_is_a_step_error_saying_when_to_retry() -> None:
    error = core.QuotaError("Limit reached", retry_after=2.0, status_code=429)
    with (
        pytest.raises(StepError, match=r"HTTP 429\); retry after 2 s") as raised,
        mapped_errors("running the step"),
    ):
        raise error
    assert raised.value.__cause__ is error


def test_the_end_of_the_run_says_each_thing_once() -> None:
    with pytest.raises(SandboxUnavailableError) as raised, mapped_errors("running the step"):
        raise core.SandboxGoneError(sandbox_id="sbx_1")
    assert "expired). The agent run stops here." in str(raised.value)
    assert ".." not in str(raised.value)
