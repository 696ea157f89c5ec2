"""The shared adapter contract (``lizard_local.contract``) for each ``lizard_adk`` object.

``LizardEnvironment`` and ``LizardPlugin`` are async (cancelling the task is the cancellation);
``LizardCodeExecutor`` is blocking, as ADK calls it from a worker thread (Ctrl-C is the
cancellation). ADK has no error types for sandboxes, so the expected errors are
``lizard_core``'s own kinds, which every object raises unchanged.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
from google.adk.code_executors.code_execution_utils import (
    CodeExecutionInput,
    CodeExecutionResult,
)
from google.adk.environment import ExecutionResult

from lizard_adk import LizardCodeExecutor, LizardEnvironment, LizardPlugin
from lizard_core.errors import CredentialsError, SandboxGoneError, TransientError
from lizard_local.contract import AdapterContract, ExpectedErrors

ERRORS = ExpectedErrors(
    sandbox_gone=SandboxGoneError,
    credentials_rejected=CredentialsError,
    transient=TransientError,
)


async def run_in_environment(environment: LizardEnvironment, code: str) -> ExecutionResult:
    await environment.initialize()  # idempotent: the first call creates the sandbox
    return await environment.execute(f"python3 -c {shlex.quote(code)}")


async def close_environment(environment: LizardEnvironment) -> None:
    await environment.close()


class TestLizardEnvironmentContract(AdapterContract):
    @pytest.fixture
    def make_adapter(self) -> Callable[..., Any]:
        return lambda **kwargs: LizardEnvironment(lifetime_ms=300_000, **kwargs)

    @pytest.fixture
    def run_python(self) -> Callable[[Any, str], object]:
        return run_in_environment

    @pytest.fixture
    def cleanup_adapter(self) -> Callable[[Any], object]:
        return close_environment

    @pytest.fixture
    def expected_errors(self) -> ExpectedErrors:
        return ERRORS


def run_in_executor(executor: LizardCodeExecutor, code: str) -> CodeExecutionResult:
    # The executor reads nothing from ADK's invocation context.
    return executor.execute_code(None, CodeExecutionInput(code=code, execution_id="contract"))  # type: ignore[arg-type]


def close_executor(executor: LizardCodeExecutor) -> None:
    executor.close()


class TestLizardCodeExecutorContract(AdapterContract):
    replaces_gone_sandbox = (
        "an executor lives as long as the app (ADK defines it with the agent): a new sandbox "
        "after expiry, and the block's result says the state was lost, as ADK's E2B environment"
    )

    @pytest.fixture
    def make_adapter(self) -> Callable[..., Any]:
        return lambda **kwargs: LizardCodeExecutor(stateful=True, lifetime_ms=300_000, **kwargs)

    @pytest.fixture
    def run_python(self) -> Callable[[Any, str], object]:
        return run_in_executor

    @pytest.fixture
    def cleanup_adapter(self) -> Callable[[Any], object]:
        return close_executor

    @pytest.fixture
    def expected_errors(self) -> ExpectedErrors:
        return ERRORS


async def run_in_plugin(plugin: LizardPlugin, code: str) -> dict[str, Any]:
    # What ADK's ToolContext gives the tools: the invocation's id.
    context = SimpleNamespace(invocation_id="contract-invocation")
    return await plugin.lizard_execute_code(code, context)  # type: ignore[arg-type]


async def close_plugin(plugin: LizardPlugin) -> None:
    await plugin.close()


class TestLizardPluginContract(AdapterContract):
    @pytest.fixture
    def make_adapter(self) -> Callable[..., Any]:
        return lambda **kwargs: LizardPlugin(lifetime_ms=300_000, **kwargs)

    @pytest.fixture
    def run_python(self) -> Callable[[Any, str], object]:
        return run_in_plugin

    @pytest.fixture
    def cleanup_adapter(self) -> Callable[[Any], object]:
        return close_plugin

    @pytest.fixture
    def expected_errors(self) -> ExpectedErrors:
        return ERRORS
