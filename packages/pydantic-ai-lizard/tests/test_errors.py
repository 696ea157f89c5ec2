"""The mapping from lizard_core errors to the workspace protocol's, one kind at a time.

A sandbox destroyed under a running command is detected by lizard_core itself (it raises
`SandboxGoneError`); that path is proven end to end in `test_backend.py`.
"""

from __future__ import annotations

import pytest
from pydantic_ai.workspaces import (
    WorkspaceError,
    WorkspaceOutputLimitError,
    WorkspaceTimeoutError,
    WorkspaceUnavailableError,
)

from lizard_core import errors as core
from lizard_core.config import SandboxConfig
from lizard_core.session import Session
from pydantic_ai_lizard._errors import decode_output, translate, workspace_errors

LIMIT = 10 * 1024 * 1024


def _session(sandbox_id: str | None = None) -> Session:
    config = SandboxConfig.from_env(
        api_key="test-key-not-used", api_url="http://127.0.0.1:9", project_id="proj_unused"
    )
    return Session(config, sandbox_id=sandbox_id)


def test_gone_sandbox_is_unavailable_and_named() -> None:
    error = translate(
        core.SandboxGoneError(sandbox_id="sbx-1"), sandbox_id="sbx-1", output_limit=LIMIT
    )
    assert isinstance(error, WorkspaceUnavailableError)
    assert "sbx-1" in str(error)
    assert "workspace='new'" in str(error)


def test_rejected_credentials_are_unavailable_without_provider_text() -> None:
    source = core.CredentialsError("liz_secret_echoed_by_the_provider", status_code=401)
    error = translate(source, sandbox_id=None, output_limit=LIMIT)
    assert isinstance(error, WorkspaceUnavailableError)
    assert "liz_secret" not in str(error)
    assert "LIZARD_API_KEY" in str(error)


def test_payment_required_is_unavailable_with_the_page_to_open() -> None:
    source = core.QuotaError(
        "Payment required", url="https://lizard.build/billing", status_code=402
    )
    error = translate(source, sandbox_id=None, output_limit=LIMIT)
    assert isinstance(error, WorkspaceUnavailableError)
    assert "https://lizard.build/billing" in str(error)


@pytest.mark.parametrize(
    "source",
    [
        core.QuotaError("Limit reached", retry_after=2.0, status_code=429),
        core.TransientError("Lizard API error 503", status_code=503),
        core.LizardIntegrationError("Lizard API error 400: bad request", status_code=400),
    ],
    ids=["rate-limit", "transient", "other"],
)
async def test_retryable_and_unknown_errors_propagate_unchanged(
    source: core.LizardIntegrationError,
) -> None:
    assert translate(source, sandbox_id="sbx-1", output_limit=LIMIT) is source
    with pytest.raises(type(source)) as raised:
        async with workspace_errors(_session()):
            raise source
    assert raised.value is source


def test_timeout_carries_decoded_partial_output() -> None:
    source = core.CommandTimeoutError(stdout=b"partial \xff", stderr=b"err", timeout=1.0)
    error = translate(source, sandbox_id=None, output_limit=LIMIT)
    assert isinstance(error, WorkspaceTimeoutError)
    assert isinstance(error, TimeoutError)
    assert (error.stdout, error.stderr) == ("partial \ufffd", "err")


def test_output_limit_carries_partial_output_and_limit() -> None:
    source = core.OutputLimitError(stdout=b"x" * 10, stderr=b"", limit=LIMIT)
    error = translate(source, sandbox_id=None, output_limit=LIMIT)
    assert isinstance(error, WorkspaceOutputLimitError)
    assert (error.limit, error.stdout, error.stderr) == (LIMIT, "x" * 10, "")


def test_broken_guest_is_a_workspace_error_not_unavailable() -> None:
    error = translate(
        core.GuestProtocolError("stream ended early"), sandbox_id="s", output_limit=LIMIT
    )
    assert type(error) is WorkspaceError
    assert "stream ended early" in str(error)


async def test_context_manager_chains_the_core_error() -> None:
    source = core.SandboxGoneError()
    with pytest.raises(WorkspaceUnavailableError) as raised:
        async with workspace_errors(_session("sbx-9")):
            raise source
    assert raised.value.__cause__ is source
    assert "sbx-9" in str(raised.value)


async def test_builtin_os_errors_pass_through() -> None:
    with pytest.raises(FileNotFoundError):
        async with workspace_errors(_session()):
            raise FileNotFoundError(2, "No such file or directory", "/workspace/missing")


def test_decode_output_replaces_invalid_utf8() -> None:
    assert decode_output(b"ok \xfe\xff") == "ok \ufffd\ufffd"
