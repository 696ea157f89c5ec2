"""The shared adapter contract (``lizard_local.contract``) for ``LizardExecutor``.

Each rule runs on lizard-local: the key never reaches the sandbox, ``cleanup()`` leaves nothing,
Ctrl-C during a step interrupts the cell and keeps the executor usable, and failures map to what
smolagents expects: a sandbox that is gone or a rejected key end the run
(``SandboxUnavailableError``), a transient failure is a ``StepError`` the model sees.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from smolagents.monitoring import AgentLogger, LogLevel

from lizard_local.contract import AdapterContract, ExpectedErrors
from smolagents_lizard import LizardExecutor, SandboxUnavailableError, StepError


def make_executor(**kwargs: Any) -> LizardExecutor:
    return LizardExecutor(logger=AgentLogger(LogLevel.OFF), lifetime_ms=300_000, **kwargs)


def run_python(executor: LizardExecutor, code: str) -> object:
    return executor.run_code_raise_errors(code)


def cleanup(executor: LizardExecutor) -> None:
    executor.cleanup()


class TestLizardExecutorContract(AdapterContract):
    @pytest.fixture
    def make_adapter(self) -> Callable[..., Any]:
        return make_executor

    @pytest.fixture
    def run_python(self) -> Callable[[Any, str], object]:
        return run_python

    @pytest.fixture
    def cleanup_adapter(self) -> Callable[[Any], object]:
        return cleanup

    @pytest.fixture
    def expected_errors(self) -> ExpectedErrors:
        return ExpectedErrors(
            sandbox_gone=SandboxUnavailableError,
            credentials_rejected=SandboxUnavailableError,
            transient=StepError,
        )
