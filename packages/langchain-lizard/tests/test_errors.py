"""Each ``lizard_core`` error kind and ``OSError`` maps to what the module docstring promises."""

from __future__ import annotations

import errno
import os

import pytest

from langchain_lizard import LizardSandboxError, SandboxUnavailableError
from langchain_lizard._errors import file_error, sandbox_errors
from lizard_core import errors as core


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
    assert type(caught.value) is expected
    assert caught.value.__cause__ is error


def test_a_rejected_key_gets_a_fixed_message() -> None:
    with pytest.raises(SandboxUnavailableError) as caught, sandbox_errors():
        raise core.CredentialsError("provider text")
    assert "provider text" not in str(caught.value)


def test_file_errors_pass_through_for_per_file_results() -> None:
    with pytest.raises(FileNotFoundError), sandbox_errors():
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", "/x")


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (errno.ENOENT, "file_not_found"),
        (errno.ENOTDIR, "file_not_found"),
        (errno.EISDIR, "is_directory"),
        (errno.EACCES, "permission_denied"),
        (errno.EPERM, "permission_denied"),
        (errno.EROFS, "permission_denied"),
        (errno.EINVAL, "invalid_path"),
        (errno.ENAMETOOLONG, "invalid_path"),
        (errno.ENOSPC, os.strerror(errno.ENOSPC)),
    ],
)
def test_os_errors_become_file_operation_codes(code: int, expected: str) -> None:
    assert file_error(OSError(code, os.strerror(code), "/x")) == expected
