"""Each ``lizard_core`` error kind maps to the SDK error the module docstring promises."""

from __future__ import annotations

from pathlib import Path

import pytest
from agents.sandbox.errors import (
    ExecTimeoutError,
    ExecTransportError,
    WorkspaceArchiveReadError,
    WorkspaceArchiveWriteError,
)

from lizard_core import errors as core
from openai_agents_lizard._errors import PREVIEW_CHARS, exec_errors, workspace_errors


@pytest.mark.parametrize(
    ("error", "retryable"),
    [
        (core.SandboxGoneError(), False),
        (core.CredentialsError("rejected"), False),
        (core.QuotaError("pay", url="https://lizard.build/billing"), False),
        (core.QuotaError("slow down", retry_after=2.0), True),
        (core.TransientError("503"), True),
        (core.GuestProtocolError("cut short"), True),
    ],
)
def test_each_kind_is_a_transport_error_that_says_whether_to_retry(
    error: core.LizardIntegrationError, retryable: bool
) -> None:
    with pytest.raises(ExecTransportError) as caught, exec_errors(["true"], None):
        raise error
    assert caught.value.__cause__ is error
    assert caught.value.context["retryable"] is retryable


def test_a_timeout_keeps_head_and_tail_of_the_output() -> None:
    stdout = b"head" + b"x" * (3 * PREVIEW_CHARS) + b"tail"
    error = core.CommandTimeoutError("timed out", stdout=stdout, stderr=b"err")
    with pytest.raises(ExecTimeoutError) as caught, exec_errors(["sleep", "9"], 1.0):
        raise error
    shown = str(caught.value.context["stdout"])
    assert shown.startswith("head")
    assert shown.endswith("tail")
    assert "cut from the middle" in shown
    assert caught.value.context["stderr"] == "err"


def test_an_output_limit_is_never_a_short_result() -> None:
    error = core.OutputLimitError("too much", stdout=b"kept", stderr=b"")
    with pytest.raises(ExecTransportError) as caught, exec_errors(["yes"], None):
        raise error
    assert caught.value.context["reason"] == "output_limit"
    assert caught.value.context["stdout"] == "kept"


@pytest.mark.parametrize(
    ("write", "kind"), [(False, WorkspaceArchiveReadError), (True, WorkspaceArchiveWriteError)]
)
def test_file_failures_are_workspace_errors(write: bool, kind: type[Exception]) -> None:
    for error in (core.TransientError("503"), PermissionError(13, "denied")):
        with pytest.raises(kind) as caught, workspace_errors(Path("/workspace/f"), write=write):
            raise error
        assert caught.value.__cause__ is error
